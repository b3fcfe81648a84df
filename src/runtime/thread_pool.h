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

  int num_threads() const { return num_threads_.load(std::memory_order_relaxed); }
  // Changes the number of threads in place, between jobs: everything that holds the pool (the
  // programs built so far) keeps a valid pool of the new size.
  void resize(int num_threads);

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long unless
  // it is the last. Runs inline when n is small, the pool has one thread, or we are already
  // inside a parallel region.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool, created once and never replaced. Its size comes from
  // ONNXTRAIN_NUM_THREADS or set_num_threads, which resizes it.
  static ThreadPool& global();
  static void set_num_threads(int n);

 private:
  void start_workers(int num_threads);
  void stop_workers();
  void worker_loop(uint64_t seen);
  // Claims and runs chunks of job `generation` until none is left. A worker that arrives late
  // (or belongs to an older job) claims nothing: the caller never waits for threads that never
  // showed up, only for chunks someone claimed.
  void run_chunks(uint64_t generation);

  std::vector<std::thread> workers_;
  std::atomic<int> num_threads_{1};
  std::mutex job_mutex_;  // one job at a time when several callers share the pool
  std::mutex mutex_;      // guards sleeping_ and the wake-up
  std::condition_variable wake_;
  int sleeping_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};  // the newest job's number
  // The current job. Written by the caller before it publishes the generation; read by a worker
  // only after it claimed a chunk, which the job cannot finish without.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<int64_t> chunks_{0};  // read before a claim, so possibly while the next job is set up
  std::atomic<uint64_t> claim_{0};  // (generation << 32) | next chunk to hand out
  std::atomic<int64_t> done_{0};    // chunks of the current job finished
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // first exception a chunk threw, rethrown in the caller
};

// Flush denormals to zero in this thread (MXCSR FTZ and DAZ); returns the previous MXCSR.
unsigned enable_flush_denormal();
void restore_mxcsr(unsigned saved);

}  // namespace onnxtrain
