#pragma once
// Memory for planned runs. Each run of a planned signature needs one arena of its plan's size.
// Arenas of finished runs stay mapped for the next run, of any signature: a run takes the smallest
// idle arena that fits it (up to twice its size), so a new batch size smaller than one seen before
// costs no new memory. Idle arenas count against one process-wide byte budget
// (ONNXTRAIN_PLAN_CACHE_MB, default 1024, or set_arena_budget); past it, the least recently used
// are unmapped. Arenas in use are never counted or evicted: a run cannot go without its memory.
// The default budget grows to the most arena memory in use at once so far (one training step's
// forward and backward), so that a step never unmaps what the next one maps again.
#include <cstddef>
#include <cstdint>

namespace onnxtrain {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes);  // maps fresh memory
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  Arena(uint8_t* mapping, size_t capacity);  // takes over a mapping
  void unmap();
  friend Arena adopt_arena(uint8_t* mapping, size_t capacity);

  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// An idle arena of at least `bytes` from the pool, or a new one.
Arena take_arena(size_t bytes);
// An arena of memory the caller mapped (`capacity` bytes at `mapping`, page aligned), counted in
// use as take_arena's are; unmapped when the pool lets it go (runtime/recording_arena.h).
Arena adopt_arena(uint8_t* mapping, size_t capacity);
// Back to the pool for reuse (or unmapped, when the budget leaves no room).
void return_arena(Arena arena);

size_t idle_arena_bytes();
size_t arena_budget();
void set_arena_budget(size_t bytes);  // evicts at once down to the new budget, which stays exact
void use_default_arena_budget(size_t bytes);  // a budget that grows to the most in use at once
void release_idle_arenas();

}  // namespace onnxtrain
