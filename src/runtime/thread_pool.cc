#include "runtime/thread_pool.h"

#include <xmmintrin.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace onnxtrain {
namespace {
thread_local bool t_in_parallel = false;

int default_threads() {
  if (const char* env = std::getenv("ONNXTRAIN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex g_global_mutex;
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

unsigned enable_flush_denormal() {
  unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
  return saved;
}

void restore_mxcsr(unsigned saved) { _mm_setcsr(saved); }

ThreadPool::ThreadPool(int num_threads) {
  OT_CHECK(num_threads >= 1, "thread pool size must be at least 1, got ", num_threads);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t begin = next_.fetch_add(chunk_);
    if (begin >= n_) break;
    try {
      (*fn_)(begin, std::min(n_, begin + chunk_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = n_;  // stop handing out chunks
    }
  }
}

void ThreadPool::worker_loop() {
  enable_flush_denormal();
  t_in_parallel = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    if (active_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = num_threads();
  if (threads == 1 || n <= grain || t_in_parallel) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads * 4, (n + grain - 1) / grain);
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    next_ = 0;
    active_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  t_in_parallel = true;
  run_chunks();
  t_in_parallel = false;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return active_.load() == 0; });
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lock(g_global_mutex);
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(default_threads());
  return *slot;
}

void ThreadPool::set_num_threads(int n) {
  std::lock_guard<std::mutex> lock(g_global_mutex);
  auto& slot = global_slot();
  if (slot && slot->num_threads() == n) return;
  slot = std::make_unique<ThreadPool>(n);
}

}  // namespace onnxtrain
