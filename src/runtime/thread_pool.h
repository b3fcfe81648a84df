#pragma once
// The engine's one thread pool. Kernels split work with parallel_for; the calling thread takes
// part, so a pool of N threads has N-1 workers. BLAS runs single-threaded inside our chunks, so
// the pool owns all the parallelism and nothing oversubscribes the cores.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace onnxtrain {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long unless
  // it is the last. Runs inline when n is small, the pool has one thread, or we are already
  // inside a parallel region.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool. Its size comes from ONNXTRAIN_NUM_THREADS or set_num_threads.
  static ThreadPool& global();
  static void set_num_threads(int n);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // one job at a time when several callers share the pool
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  // The current job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  std::exception_ptr error_;  // first exception a chunk threw, rethrown in the caller
};

// Flush denormals to zero in this thread (MXCSR FTZ and DAZ); returns the previous MXCSR.
unsigned enable_flush_denormal();
void restore_mxcsr(unsigned saved);

}  // namespace onnxtrain
