#pragma once
// Memory for a recording run (a shape signature's first run, runtime/planned_runner.h), which
// later becomes the plan's arena.
//
// Fresh memory is slow to touch: a page fault per 4 KiB page and, on a virtual machine whose
// balloon takes freed memory back (Firecracker, most clouds), a host fault under each guest page
// too (core/huge_pages.h). A recording run used to map each intermediate on its own and unmap it
// when freed (llama at 1 thread: 745 thousand faults, 1.9 s of system time), and the plan's first
// run then faulted its whole fresh arena in again (4185 huge-page faults, 2.2 s).
//
// So the recording run allocates its intermediates inside one reservation, reusing what it frees
// (best fit, neighbours merged), and when it finishes the reservation is cut to the plan's arena
// size and becomes that arena: the pages the recording touched are the ones the next run uses.
// Where a core is free they are small pages, collapsed into huge ones afterwards in the
// background; where none is, huge pages from the start.
//
// The recording holds no more memory than a planned run will: free pages past the most bytes ever
// live at once (which no plan needs) go back as they are freed, and so do the pages of large holes
// whenever the run grows into new memory (an online best fit leaves holes that the plan's offline
// layout does not: llama's recording reached 882 MiB for 805 live at most).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/arena_pool.h"

namespace onnxtrain {

class RecordingArena : public std::enable_shared_from_this<RecordingArena> {
 public:
  // Reserves address space (no memory) for up to `reserve_bytes`; null if the system refuses.
  static std::shared_ptr<RecordingArena> reserve(size_t reserve_bytes);
  // The reservation a recording run gets: the machine's physical memory, which no run can exceed.
  static std::shared_ptr<RecordingArena> reserve_for_a_run();
  ~RecordingArena();
  RecordingArena(const RecordingArena&) = delete;
  RecordingArena& operator=(const RecordingArena&) = delete;

  static constexpr size_t kAlign = 64;

  // A 64-byte aligned block that comes back here when its last owner lets go; null when the
  // reservation is full (the caller then maps the block on its own).
  std::shared_ptr<void> allocate(size_t bytes);

  // The reservation as an arena of at least `bytes`, counted in use by the arena pool; the memory
  // beyond it goes back to the system. Empty (and nothing changes) while blocks are still owned or
  // when `bytes` exceeds the reservation. Afterwards this object allocates nothing more.
  Arena into_arena(size_t bytes);

  // For tests and reports: the highest offset ever allocated, and the blocks still owned.
  size_t high_water_bytes() const;
  size_t live_blocks() const;

 private:
  RecordingArena(uint8_t* base, size_t reserved) : base_(base), reserved_(reserved) {}
  struct Hole {
    size_t bytes;
    bool resident;  // whether its pages may still be in memory
  };
  void release(size_t offset, size_t bytes);
  bool commit_through(size_t end);  // makes [0, end) readable and writable
  void add_hole(size_t offset, Hole hole);
  std::map<size_t, Hole>::iterator erase_hole(std::map<size_t, Hole>::iterator it);
  void release_resident_holes();

  uint8_t* base_;
  size_t reserved_;
  mutable std::mutex mutex_;
  size_t committed_ = 0;  // [0, committed_) is read-write; the rest of the reservation is not
  size_t top_ = 0;        // [top_, reserved_) has no block; below it, blocks and free holes
  size_t high_water_ = 0;
  size_t live_ = 0;
  size_t live_bytes_ = 0;
  size_t most_live_bytes_ = 0;
  std::map<size_t, Hole> holes_by_offset_;
  std::multimap<size_t, size_t> holes_by_size_;  // bytes -> offset
};

}  // namespace onnxtrain
