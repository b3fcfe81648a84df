#include "runtime/thread_pool.h"

#include <immintrin.h>
#include <sched.h>
#include <xmmintrin.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/huge_pages.h"

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

// Kernels run back to back, each with its own parallel region: a worker that went to sleep after
// one region needs a futex wake-up (tens of microseconds) for the next. Spinning this long first
// keeps consecutive regions cheap, and an idle pool still sleeps soon after a step.
constexpr auto kSpin = std::chrono::microseconds(200);

// A spinning thread gives its core away now and then: where the scheduler put a worker on the
// caller's core (two vCPUs shared with torch's and OpenBLAS's threads), a pure spin would hold
// the core that the thread it waits for needs, until the time slice ends.
inline void pause_or_yield(unsigned spins) {
  if (spins % 64 == 0)
    std::this_thread::yield();
  else
    _mm_pause();
}

// A claim index beyond any chunk count: the claim word of a job being set up.
constexpr uint64_t kClosedClaim = 0xFFFFFFFFu;

}  // namespace

unsigned enable_flush_denormal() {
  unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
  return saved;
}

void restore_mxcsr(unsigned saved) { _mm_setcsr(saved); }

ThreadPool::ThreadPool(int num_threads) { start_workers(num_threads); }

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::start_workers(int num_threads) {
  OT_CHECK(num_threads >= 1, "thread pool size must be at least 1, got ", num_threads);
  stop_ = false;
  // New workers start from the current job number, so they never take a finished job for a new one.
  const uint64_t seen = generation_.load(std::memory_order_acquire);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, seen] { worker_loop(seen); });
  num_threads_.store(num_threads, std::memory_order_relaxed);
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    // No job of this generation exists: claim_ still carries an older one, so nobody runs anything.
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  num_threads_.store(1, std::memory_order_relaxed);
}

void ThreadPool::resize(int num_threads) {
  OT_CHECK(num_threads >= 1, "thread pool size must be at least 1, got ", num_threads);
  std::lock_guard<std::mutex> job_lock(job_mutex_);  // no job runs while the workers change
  if (num_threads == this->num_threads()) return;
  stop_workers();
  start_workers(num_threads);
}

void ThreadPool::run_chunks(uint64_t generation) {
  for (;;) {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    if ((claim >> 32) != (generation & 0xFFFFFFFFu)) return;  // a newer job: nothing of ours is left
    const int64_t index = static_cast<int64_t>(claim & 0xFFFFFFFFu);
    if (index >= chunks_.load(std::memory_order_relaxed)) return;
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
    if (!failed_.load(std::memory_order_relaxed)) {
      const int64_t begin = index * chunk_;
      try {
        (*fn_)(begin, std::min(n_, begin + chunk_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_ = true;  // the remaining chunks are counted but not run
      }
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop(uint64_t seen) {
  enable_flush_denormal();
  t_in_parallel = true;
  for (;;) {
    // Spin for the next job, then sleep until one is posted.
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (unsigned spins = 1;
         generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < deadline; ++spins)
      pause_or_yield(spins);
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleeping_;
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      --sleeping_;
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(seen);
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
  const int64_t target = std::min<int64_t>(threads * 4, (n + grain - 1) / grain);
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Close the previous job's claims before its state is overwritten: a worker that read the old
  // claim word just before the last chunk was taken would otherwise pass the bound check against
  // the new chunk count and claim a chunk of the new job under the old generation, running it
  // twice and miscounting done_.
  claim_.store(((generation & 0xFFFFFFFFu) << 32) | kClosedClaim, std::memory_order_release);
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + target - 1) / target;
  chunks_.store((n + chunk_ - 1) / chunk_, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  claim_.store((generation & 0xFFFFFFFFu) << 32, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.store(generation, std::memory_order_release);
    if (sleeping_ > 0) wake_.notify_all();
  }
  t_in_parallel = true;
  run_chunks(generation);
  t_in_parallel = false;
  // Only chunks that someone claimed can be outstanding; they finish soon.
  const int64_t chunks = chunks_.load(std::memory_order_relaxed);
  for (unsigned spins = 1; done_.load(std::memory_order_acquire) < chunks; ++spins) pause_or_yield(spins);
  if (error_) std::rethrow_exception(error_);
}

namespace {
// Whether the global pool leaves a core of this process's free, for background page work
// (core/huge_pages.h).
void note_spare_core(int pool_threads) {
  cpu_set_t cores;
  const int available = sched_getaffinity(0, sizeof(cores), &cores) == 0
                            ? CPU_COUNT(&cores)
                            : static_cast<int>(std::thread::hardware_concurrency());
  set_spare_core(pool_threads < available);
}
}  // namespace

ThreadPool& ThreadPool::global() {
  static ThreadPool& pool = []() -> ThreadPool& {
    static ThreadPool made(default_threads());
    note_spare_core(made.num_threads());
    return made;
  }();
  return pool;
}

void ThreadPool::set_num_threads(int n) {
  global().resize(n);
  note_spare_core(n);
}

}  // namespace onnxtrain
