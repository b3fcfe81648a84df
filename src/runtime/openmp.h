#pragma once
// oneDNN parallelizes with OpenMP, but the engine's pool owns the threads: calls into oneDNN run
// single-threaded inside one of the pool's chunks. The OpenMP thread count is a per-thread
// setting, restored afterwards, so PyTorch's own setting (on the Python thread) is untouched.
#include <omp.h>

namespace onnxtrain {

class SingleThreadedOpenMP {
 public:
  SingleThreadedOpenMP() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~SingleThreadedOpenMP() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  SingleThreadedOpenMP(const SingleThreadedOpenMP&) = delete;
  SingleThreadedOpenMP& operator=(const SingleThreadedOpenMP&) = delete;

 private:
  int saved_;
};

}  // namespace onnxtrain
