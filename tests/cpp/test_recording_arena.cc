// A recording run's memory (runtime/recording_arena.h) reuses what it frees, gives back what no
// plan will keep, and becomes the plan's arena; the background collapse into huge pages
// (core/huge_pages.h) never changes what memory holds.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "core/huge_pages.h"
#include "runtime/arena_pool.h"
#include "runtime/recording_arena.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

uint8_t* at(const std::shared_ptr<void>& block) { return static_cast<uint8_t*>(block.get()); }

TEST(RecordingArena, ReusesFreedBlocksAndMergesNeighbours) {
  auto memory = RecordingArena::reserve(64 * kMiB);
  ASSERT_NE(memory, nullptr);
  auto a = memory->allocate(kMiB), b = memory->allocate(kMiB), c = memory->allocate(kMiB);
  auto keep = memory->allocate(100);  // above c, so that freeing c leaves a hole, not a lower top
  ASSERT_TRUE(a && b && c && keep);
  EXPECT_EQ(at(b), at(a) + kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(keep.get()) % RecordingArena::kAlign, 0u);
  uint8_t* first = at(a);
  a.reset();
  b.reset();  // merged with a's hole
  auto two = memory->allocate(2 * kMiB);
  EXPECT_EQ(at(two), first);
  c.reset();
  auto small = memory->allocate(kMiB / 2);  // the best fitting hole, c's
  EXPECT_EQ(at(small), first + 2 * kMiB);
  const size_t high = memory->high_water_bytes();
  keep.reset();
  small.reset();  // c's hole and the freed top merge back into free space at the top
  auto big = memory->allocate(3 * kMiB);
  EXPECT_EQ(at(big), first + 2 * kMiB);
  EXPECT_EQ(memory->high_water_bytes(), std::max(high, 5 * kMiB));
  EXPECT_EQ(memory->live_blocks(), 2u);
}

TEST(RecordingArena, SaysWhenItIsFullSoThatTheCallerMapsTheBlockElsewhere) {
  auto memory = RecordingArena::reserve(4 * kMiB);
  ASSERT_NE(memory, nullptr);
  auto most = memory->allocate(3 * kMiB);
  ASSERT_TRUE(most);
  EXPECT_EQ(memory->allocate(2 * kMiB), nullptr);
  std::memset(most.get(), 7, 3 * kMiB);  // committed and writable
}

TEST(RecordingArena, BecomesAnArenaOnlyOnceItsBlocksAreFree) {
  release_idle_arenas();
  auto memory = RecordingArena::reserve(256 * kMiB);
  ASSERT_NE(memory, nullptr);
  auto block = memory->allocate(5 * kMiB);
  uint8_t* base = at(block);
  std::memset(base, 1, 5 * kMiB);
  EXPECT_FALSE(memory->into_arena(4 * kMiB));  // a block is still owned: nothing changes
  block.reset();
  EXPECT_FALSE(memory->into_arena(512 * kMiB));  // more than the reservation
  Arena arena = memory->into_arena(6 * kMiB);
  ASSERT_TRUE(arena);
  EXPECT_EQ(arena.data(), base);
  EXPECT_GE(arena.capacity(), 6 * kMiB);
  EXPECT_EQ(arena.data()[5 * kMiB - 1], 1);  // the pages the recording touched, as it left them
  std::memset(arena.data(), 2, arena.capacity());
  EXPECT_EQ(memory->allocate(64), nullptr);  // the reservation is the arena's now
  const size_t capacity = arena.capacity();
  return_arena(std::move(arena));  // counted in use when adopted: the default budget keeps it
  EXPECT_EQ(idle_arena_bytes(), capacity);
  Arena again = take_arena(6 * kMiB);
  EXPECT_EQ(again.data(), base);
  return_arena(std::move(again));
  release_idle_arenas();
}

// Sets whether the engine leaves a core free for the background collapse, for one test.
struct ScopedSpareCore {
  explicit ScopedSpareCore(bool spare) : saved(has_spare_core()) { set_spare_core(spare); }
  ~ScopedSpareCore() { set_spare_core(saved); }
  bool saved;
};

bool resident(const uint8_t* page) {
  unsigned char in_memory = 0;
  EXPECT_EQ(mincore(const_cast<uint8_t*>(page), 4096, &in_memory), 0);
  return in_memory & 1;
}

TEST(HugePages, CollapsingKeepsWhatTheMemoryHoldsAndForgetsUnmappedRanges) {
  ScopedSpareCore spare(true);
  const size_t bytes = 8 * kMiB;
  void* raw = mmap(nullptr, bytes + 2 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 2 * kMiB - 1) & ~(2 * kMiB - 1));
  for (size_t i = 0; i < bytes / 2; i += 4096) p[i] = static_cast<uint8_t>(i / 4096 + 1);  // half written
  const size_t before = wait_for_huge_page_collapses();
  collapse_to_huge_pages_later(p, bytes);
  const size_t collapsed = wait_for_huge_page_collapses() - before;
  // The written half at least (an untouched range may be left alone); 0: a kernel without MADV_COLLAPSE.
  EXPECT_TRUE((collapsed >= bytes / 2 && collapsed <= bytes) || collapsed == 0) << collapsed;
  for (size_t i = 0; i < bytes / 2; i += 4096) {
    ASSERT_EQ(p[i], static_cast<uint8_t>(i / 4096 + 1)) << i;
  }
  for (size_t i = bytes / 2; i < bytes; i += 4096) {
    ASSERT_EQ(p[i], 0) << i;
  }
  // A range queued, then forgotten and unmapped, is never touched afterwards.
  collapse_to_huge_pages_later(p, bytes);
  forget_huge_page_collapse(p, bytes);
  munmap(raw, bytes + 2 * kMiB);
  wait_for_huge_page_collapses();
}

TEST(HugePages, WithoutASpareCoreMemoryIsOnlyAdvised) {
  ScopedSpareCore spare(false);
  const size_t before = wait_for_huge_page_collapses();
  Arena arena = take_arena(8 * kMiB);  // a fresh arena asks for its collapse
  std::memset(arena.data(), 3, arena.capacity());
  EXPECT_EQ(wait_for_huge_page_collapses(), before);  // nothing queued, nothing collapsed
  EXPECT_EQ(arena.data()[arena.capacity() - 1], 3);
  return_arena(std::move(arena));
  release_idle_arenas();
}

TEST(RecordingArena, FreePagesItWillNotKeepGoBackAsItGrows) {
  auto memory = RecordingArena::reserve(64 * kMiB);
  ASSERT_NE(memory, nullptr);
  auto hole = memory->allocate(4 * kMiB), keep = memory->allocate(kMiB);
  std::memset(hole.get(), 1, 4 * kMiB);
  std::memset(keep.get(), 1, kMiB);
  uint8_t* hole_at = at(hole);
  hole.reset();  // a hole below a live block: its pages stay, for the next block that fits
  EXPECT_TRUE(resident(hole_at + 2 * kMiB));
  auto grow = memory->allocate(6 * kMiB);  // fits in no hole: new memory, and the hole's pages go
  EXPECT_FALSE(resident(hole_at + 2 * kMiB));
  std::memset(grow.get(), 1, 6 * kMiB);
  // Freed memory past the most ever live at once is past any plan's arena: it goes at once.
  auto past = memory->allocate(5 * kMiB);  // too big for the 4 MiB hole: above `grow`, 12 MiB live
  ASSERT_EQ(at(past), at(grow) + 6 * kMiB);
  std::memset(past.get(), 1, 5 * kMiB);
  grow.reset();
  EXPECT_TRUE(resident(at(past) - kMiB));  // below the most live: kept
  past.reset();
  EXPECT_FALSE(resident(hole_at + 14 * kMiB));  // past the 12 MiB once live: gone
  EXPECT_TRUE(resident(hole_at + 5 * kMiB));
}

TEST(RecordingArena, TheRecordingRunsMemoryIsThePlansFirstArena) {
  release_idle_arenas();
  TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
  const int64_t batch = 4096;  // intermediates of several MiB, so that the arena is worth reusing
  std::vector<Tensor> feeds{random_tensor(DType::Float32, {batch, 8}, 1), random_tensor(DType::Float32, {16, 8}, 2),
                            random_tensor(DType::Float32, {16}, 3), random_tensor(DType::Float32, {4, 16}, 4),
                            random_tensor(DType::Float32, {4}, 5)};
  const Tensor seed_grad = random_tensor(DType::Float32, {batch, 4}, 7);
  std::vector<std::vector<Tensor>> grads;
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> out;
    auto call = s.forward(feeds, 0, out);
    if (step == 1) {
      EXPECT_EQ(idle_arena_bytes(), 0u);  // the run took the recording's memory
    }
    grads.push_back(s.backward(*call, {seed_grad}));
    call.reset();
    const int64_t planned = s.runner().arena_bytes(shape_signature(feeds));
    ASSERT_GT(planned, 0);
    EXPECT_GE(idle_arena_bytes(), static_cast<size_t>(planned));  // back in the pool after the run
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    for (int64_t j = 0; j < grads[0][i].numel(); ++j)
      ASSERT_EQ(grads[1][i].item_as_double(j), grads[0][i].item_as_double(j));
  }
  release_idle_arenas();
}

}  // namespace
}  // namespace onnxtrain::testing
