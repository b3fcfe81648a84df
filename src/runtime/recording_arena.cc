#include "runtime/recording_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/huge_pages.h"

namespace onnxtrain {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Committed in steps this large: each mprotect splits or merges mappings, so not per block.
constexpr size_t kCommitStep = size_t{8} << 20;
// Holes at least this large give their pages back when the run touches new memory.
constexpr size_t kReleasedHoleBytes = size_t{1} << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

std::shared_ptr<RecordingArena> RecordingArena::reserve(size_t reserve_bytes) {
  const size_t reserved = round_up(std::max<size_t>(reserve_bytes, kHugePage), kHugePage);
  // Address space only: PROT_NONE is not charged against the commit limit, so this works under
  // strict overcommit too. Aligned to a huge page, so that the arena's pages can be huge ones.
  void* raw = mmap(nullptr, reserved + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + reserved + kHugePage;
  if (end > aligned + reserved) munmap(reinterpret_cast<void*>(aligned + reserved), end - aligned - reserved);
  return std::shared_ptr<RecordingArena>(new RecordingArena(reinterpret_cast<uint8_t*>(aligned), reserved));
}

std::shared_ptr<RecordingArena> RecordingArena::reserve_for_a_run() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const size_t physical = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                                                : size_t{64} << 30;
  return reserve(std::min(physical, size_t{1} << 40));
}

RecordingArena::~RecordingArena() {
  if (base_) munmap(base_, reserved_);
}

bool RecordingArena::commit_through(size_t end) {
  if (end <= committed_) return true;
  const size_t target = std::min(reserved_, round_up(end, kCommitStep));
  if (end > target) return false;
  if (mprotect(base_ + committed_, target - committed_, PROT_READ | PROT_WRITE) != 0) return false;
  // Without a core for the background collapse, the run faults in huge pages itself: fewer faults
  // than small pages and a collapse afterwards would cost (core/huge_pages.h).
  if (!has_spare_core()) madvise(base_ + committed_, target - committed_, MADV_HUGEPAGE);
  committed_ = target;
  return true;
}

std::shared_ptr<void> RecordingArena::allocate(size_t bytes) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), kAlign);
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!base_) return nullptr;
    auto best = holes_by_size_.lower_bound(size);
    if (best != holes_by_size_.end()) {
      offset = best->second;
      const Hole hole = holes_by_offset_.at(offset);
      holes_by_size_.erase(best);
      holes_by_offset_.erase(offset);
      if (hole.bytes > size) add_hole(offset + size, {hole.bytes - size, hole.resident});
    } else {
      if (top_ + size > reserved_ || !commit_through(top_ + size)) return nullptr;
      offset = top_;
      top_ += size;
      if (top_ > high_water_) {
        high_water_ = top_;
        release_resident_holes();
      }
    }
    ++live_;
    live_bytes_ += size;
    most_live_bytes_ = std::max(most_live_bytes_, live_bytes_);
  }
  auto self = shared_from_this();
  return std::shared_ptr<void>(base_ + offset, [self, offset, size](void*) { self->release(offset, size); });
}

void RecordingArena::add_hole(size_t offset, Hole hole) {
  holes_by_offset_.emplace(offset, hole);
  holes_by_size_.emplace(hole.bytes, offset);
}

std::map<size_t, RecordingArena::Hole>::iterator RecordingArena::erase_hole(std::map<size_t, Hole>::iterator it) {
  auto range = holes_by_size_.equal_range(it->second.bytes);
  for (auto s = range.first; s != range.second; ++s)
    if (s->second == it->first) {
      holes_by_size_.erase(s);
      break;
    }
  return holes_by_offset_.erase(it);
}

void RecordingArena::release_resident_holes() {
  // The run grows into memory it never touched while holes it freed hold pages it may never reuse
  // (llama's long-vocabulary loss gradient fits in none of them). Their pages go back, so that
  // what the recording holds stays near what is live; a block placed there later faults them in.
  for (auto& [offset, hole] : holes_by_offset_) {
    if (!hole.resident || hole.bytes < kReleasedHoleBytes) continue;
    const size_t from = round_up(offset, 4096), to = (offset + hole.bytes) / 4096 * 4096;
    if (to > from) madvise(base_ + from, to - from, MADV_DONTNEED);
    hole.resident = false;
  }
}

void RecordingArena::release(size_t offset, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  --live_;
  live_bytes_ -= bytes;
  Hole hole{bytes, true};  // the block's pages were touched
  auto next = holes_by_offset_.lower_bound(offset);
  if (next != holes_by_offset_.end() && next->first == offset + hole.bytes) {
    hole.bytes += next->second.bytes;
    next = erase_hole(next);
  }
  if (next != holes_by_offset_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.bytes == offset) {
      offset = previous->first;
      hole.bytes += previous->second.bytes;
      erase_hole(previous);
    }
  }
  // Free pages past the most bytes ever live at once are past the plan's arena too (a plan needs
  // no more than that, and the arena is cut there): their memory goes back now, so that the
  // recording holds no more than a planned run will while the gradients it hands out grow.
  const size_t past_the_plan = round_up(std::max(offset, most_live_bytes_), 4096);
  const size_t end = (offset + hole.bytes) / 4096 * 4096;
  if (end > past_the_plan) madvise(base_ + past_the_plan, end - past_the_plan, MADV_DONTNEED);
  if (offset + hole.bytes == top_) {  // back to the free space at the top
    top_ = offset;
    return;
  }
  add_hole(offset, hole);
}

Arena RecordingArena::into_arena(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t capacity = round_up(std::max<size_t>(bytes, 1), 4096);
  if (!base_ || live_ > 0 || capacity > reserved_ || !commit_through(capacity)) return Arena();
  // The tail past the arena goes back to the system: the pages of it the recording touched too.
  if (capacity < reserved_) munmap(base_ + capacity, reserved_ - capacity);
  uint8_t* mapping = std::exchange(base_, nullptr);
  collapse_to_huge_pages_later(mapping, capacity);  // small pages where a core was free: core/huge_pages.h
  return adopt_arena(mapping, capacity);
}

size_t RecordingArena::high_water_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return high_water_;
}

size_t RecordingArena::live_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_;
}

}  // namespace onnxtrain
