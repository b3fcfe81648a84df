// The engine's thread pool: every index visited exactly once, jobs posted the moment a pool is
// born, exceptions carried back to the caller, nested regions run inline.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <stdexcept>
#include <vector>

#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Back-to-back jobs of varying sizes: a worker that read the previous job's claim word just as its
// last chunk was taken once claimed a chunk of the next job under the old generation, running it
// twice (and finishing the job early). Enough jobs to hit that window on two cores.
TEST(ThreadPool, EveryIndexOnceAcrossManyBackToBackJobs) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 100000; ++job) {
      const int64_t n = 1 + job % 97;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, job " << job;
    }
  }
}

TEST(ThreadPool, JobPostedAsThePoolIsBornCompletes) {
  for (int round = 0; round < 200; ++round) {
    ThreadPool pool(3);  // workers may not have started when the job is posted
    std::atomic<int64_t> sum{0};
    pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t) {
    if (b >= 50) throw std::runtime_error("chunk failed");
  }), std::runtime_error);
  std::atomic<int> count{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { count += static_cast<int>(e - b); });
  EXPECT_EQ(count.load(), 100);
}

TEST(ThreadPool, NestedRegionsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](int64_t ib, int64_t ie) { inner += static_cast<int>(ie - ib); });
  });
  EXPECT_EQ(inner.load(), 80);
}

// Programs hold the global pool by reference: set_num_threads must resize that pool, not replace it.
TEST(ThreadPool, SetNumThreadsResizesTheGlobalPoolInPlace) {
  ThreadPool& pool = ThreadPool::global();
  const int saved = pool.num_threads();
  for (int n : {3, 1, 2}) {
    ThreadPool::set_num_threads(n);
    EXPECT_EQ(&ThreadPool::global(), &pool);
    EXPECT_EQ(pool.num_threads(), n);
    std::atomic<int> count{0};
    std::mutex mutex;
    std::set<std::thread::id> ids;
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
      count += static_cast<int>(e - b);
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(count.load(), 64);
    EXPECT_LE(static_cast<int>(ids.size()), n);
  }
  ThreadPool::set_num_threads(saved);
}

TEST(ThreadPool, ResizeWhileAnotherThreadRunsJobs) {
  ThreadPool pool(2);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> total{0};
  std::thread user([&] {
    while (!stop) pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { total += e - b; });
  });
  for (int k = 0; k < 50; ++k) pool.resize(1 + k % 4);
  stop = true;
  user.join();
  EXPECT_EQ(total.load() % 1000, 0);
}

}  // namespace
}  // namespace onnxtrain
