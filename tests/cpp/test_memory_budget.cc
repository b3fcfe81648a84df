// Memory that outlives a step has a bound: memory plans per session, idle arenas and cached
// buffers process-wide, each evicting the least recently used past its limit.
#include <gtest/gtest.h>

#include "core/buffer_cache.h"
#include "runtime/arena_pool.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

// Restores a process-wide limit when a test ends, whatever it set.
template <size_t (*Get)(), void (*Set)(size_t)>
struct ScopedLimit {
  explicit ScopedLimit(size_t bytes) : saved(Get()) { Set(bytes); }
  ~ScopedLimit() { Set(saved); }
  size_t saved;
};
using ScopedArenaBudget = ScopedLimit<arena_budget, set_arena_budget>;
using ScopedBufferLimit = ScopedLimit<buffer_cache_limit, set_buffer_cache_limit>;

TEST(ArenaPool, ReusesAnIdleArenaThatFitsAndEvictsTheOldestPastTheBudget) {
  release_idle_arenas();
  ScopedArenaBudget budget(3 << 20);
  Arena a = take_arena(1 << 20);
  uint8_t* first = a.data();
  return_arena(std::move(a));
  EXPECT_EQ(idle_arena_bytes(), size_t(1) << 20);
  Arena b = take_arena(600 << 10);  // fits in the idle 1 MiB arena, within twice its need
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(idle_arena_bytes(), 0u);
  Arena tiny = take_arena(4096);  // a 1 MiB arena would be wasted on it: a fresh one
  EXPECT_LT(tiny.capacity(), size_t(1) << 20);
  return_arena(std::move(b));
  return_arena(take_arena(2 << 20));  // 1 + 2 MiB idle: at the budget
  EXPECT_EQ(idle_arena_bytes(), size_t(3) << 20);
  return_arena(std::move(tiny));  // past it: the oldest (the 1 MiB arena) goes
  EXPECT_EQ(idle_arena_bytes(), (size_t(2) << 20) + 4096);
  set_arena_budget(0);
  EXPECT_EQ(idle_arena_bytes(), 0u);
}

TEST(ArenaPool, TheDefaultBudgetKeepsTheArenasOfAStepThatExceedsIt) {
  release_idle_arenas();
  ScopedArenaBudget restore(arena_budget());
  use_default_arena_budget(1 << 20);
  Arena forward = take_arena(1 << 20), backward = take_arena(2 << 20);  // 3 MiB in use at once
  return_arena(std::move(forward));
  return_arena(std::move(backward));
  EXPECT_GE(idle_arena_bytes(), size_t(3) << 20);  // both stay for the next step
  set_arena_budget(1 << 20);  // a budget the user sets is kept exactly
  EXPECT_LE(idle_arena_bytes(), size_t(1) << 20);
}

TEST(BufferCache, StaysWithinItsLimitEvictingTheLeastRecentlyFreed) {
  release_cached_buffers();
  ScopedBufferLimit limit(1 << 20);
  for (size_t kib = 100; kib < 400; kib += 7) {  // many distinct sizes, as variable shapes make
    allocate_buffer(kib << 10);  // freed at once, into the cache
    EXPECT_LE(cached_buffer_bytes(), size_t(1) << 20);
  }
  EXPECT_GT(cached_buffer_bytes(), 0u);
  void* freed = nullptr;
  {
    auto block = allocate_buffer(200 << 10);
    freed = block.get();
  }
  EXPECT_EQ(allocate_buffer(200 << 10).get(), freed);  // the most recently freed is reused
  release_cached_buffers();
  EXPECT_EQ(cached_buffer_bytes(), 0u);
}

TEST(PlannedRunner, KeepsAtMostItsPlanLimitAcrossManyShapes) {
  TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
  auto feeds_for = [](int64_t batch) {
    return std::vector<Tensor>{random_tensor(DType::Float32, {batch, 8}, uint64_t(batch)),
                               random_tensor(DType::Float32, {16, 8}, 2), random_tensor(DType::Float32, {16}, 3),
                               random_tensor(DType::Float32, {4, 16}, 4), random_tensor(DType::Float32, {4}, 5)};
  };
  const int64_t kShapes = static_cast<int64_t>(PlannedRunner::kMaxPlans) + 20;
  std::vector<Tensor> reference;
  for (int64_t batch = 1; batch <= kShapes; ++batch) {
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second run of a shape builds its plan
      std::vector<Tensor> out;
      auto call = s.forward(feeds_for(batch), 0, out);
      auto grads = s.backward(*call, {random_tensor(DType::Float32, {batch, 4}, 7)});
      if (batch == 1 && repeat == 0) reference = grads;
    }
    EXPECT_LE(s.runner().num_plans(), PlannedRunner::kMaxPlans);
  }
  EXPECT_EQ(s.runner().num_plans(), PlannedRunner::kMaxPlans);
  EXPECT_EQ(s.runner().arena_bytes(shape_signature(feeds_for(1))), -1);  // the oldest went first
  // An evicted shape plans again and computes the same.
  std::vector<Tensor> out;
  auto call = s.forward(feeds_for(1), 0, out);
  auto again = s.backward(*call, {random_tensor(DType::Float32, {1, 4}, 7)});
  ASSERT_EQ(again.size(), reference.size());
  for (size_t i = 0; i < again.size(); ++i)
    for (int64_t j = 0; j < again[i].numel(); ++j) EXPECT_EQ(again[i].item_as_double(j), reference[i].item_as_double(j));
}

}  // namespace
}  // namespace onnxtrain::testing
