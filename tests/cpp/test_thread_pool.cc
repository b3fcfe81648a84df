// The engine's thread pool: every index visited exactly once, jobs posted the moment a pool is
// born, exceptions carried back to the caller, nested regions run inline.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

TEST(ThreadPool, EveryIndexOnceAcrossManyBackToBackJobs) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 2000; ++job) {
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

}  // namespace
}  // namespace onnxtrain
