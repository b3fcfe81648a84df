#include "runtime/arena_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/huge_pages.h"

namespace onnxtrain {

Arena::Arena(size_t bytes) {
  capacity_ = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  // A mapping of its own, rather than malloc: unmapping returns it to the system at once, where
  // glibc would keep freed large blocks in the heap once its mmap threshold adapts to their size.
  void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  OT_CHECK(p != MAP_FAILED, "out of memory mapping a ", capacity_, "-byte arena");
  data_ = static_cast<uint8_t*>(p);
  // Its first run faults it in in small pages; huge pages come afterwards, off the run's path.
  collapse_to_huge_pages_later(data_, capacity_);
}

Arena::Arena(uint8_t* mapping, size_t capacity) : data_(mapping), capacity_(capacity) {}

Arena::~Arena() { unmap(); }

void Arena::unmap() {
  if (!data_) return;
  forget_huge_page_collapse(data_, capacity_);
  munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
}

Arena::Arena(Arena&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

namespace {

class ArenaPool {
 public:
  ArenaPool() {
    const char* env = std::getenv("ONNXTRAIN_PLAN_CACHE_MB");
    budget_ = (env ? static_cast<size_t>(std::atoll(env)) : 1024) << 20;
    budget_is_the_default_ = env == nullptr;
  }

  Arena adopt(Arena arena) {
    std::lock_guard<std::mutex> lock(mutex_);
    count_in_use(arena.capacity());
    return arena;
  }

  Arena take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        // Up to twice the need: a much larger arena is better kept for the run it was made for.
        if (it->capacity() >= bytes && it->capacity() / 2 <= bytes &&
            (best == idle_.end() || it->capacity() < best->capacity()))
          best = it;
      }
      if (best != idle_.end()) {
        Arena arena = std::move(*best);
        idle_bytes_ -= arena.capacity();
        idle_.erase(best);
        count_in_use(arena.capacity());
        return arena;
      }
    }
    Arena fresh(bytes);  // mapped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    count_in_use(fresh.capacity());
    return fresh;
  }

  void give(Arena arena) {
    std::list<Arena> evicted;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_bytes_ -= std::min(in_use_bytes_, arena.capacity());
    idle_bytes_ += arena.capacity();
    idle_.push_back(std::move(arena));  // the back is the most recently used
    evict_to(limit(), evicted);
  }

  size_t idle_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_bytes_;
  }
  size_t budget() {
    std::lock_guard<std::mutex> lock(mutex_);
    return budget_;
  }
  void set_budget(size_t bytes, bool growing) {
    std::list<Arena> evicted;
    std::lock_guard<std::mutex> lock(mutex_);
    budget_ = bytes;
    budget_is_the_default_ = growing;
    evict_to(limit(), evicted);
  }
  void release() {
    std::list<Arena> evicted;
    std::lock_guard<std::mutex> lock(mutex_);
    evict_to(0, evicted);
  }

 private:
  void count_in_use(size_t bytes) {
    in_use_bytes_ += bytes;
    peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
  }

  // The default budget never evicts below the most arena memory the process has had in use at
  // once: a training step whose forward and backward arenas together exceed it would otherwise
  // unmap them after every step and fault them in again on the next (`bench/run --models
  // llama_100m`: onnxtrain-step-2.15 at 2 threads took 1.17x ORT's step before, 0.81x after).
  // Keeping them raises no peak, since the process held them all at that peak. A budget that the
  // user set is kept exactly.
  size_t limit() const { return budget_is_the_default_ ? std::max(budget_, peak_in_use_bytes_) : budget_; }

  void evict_to(size_t limit, std::list<Arena>& evicted) {
    while (idle_bytes_ > limit && !idle_.empty()) {
      idle_bytes_ -= idle_.front().capacity();
      evicted.splice(evicted.end(), idle_, idle_.begin());
    }
  }

  std::mutex mutex_;
  std::list<Arena> idle_;
  size_t idle_bytes_ = 0;
  size_t in_use_bytes_ = 0;
  size_t peak_in_use_bytes_ = 0;
  size_t budget_ = 0;
  bool budget_is_the_default_ = true;
};

// Never destroyed: runs kept alive by Python objects may return arenas after static destructors.
ArenaPool& pool() {
  static ArenaPool* p = new ArenaPool();
  return *p;
}

}  // namespace

Arena take_arena(size_t bytes) { return pool().take(bytes); }
Arena adopt_arena(uint8_t* mapping, size_t capacity) { return pool().adopt(Arena(mapping, capacity)); }
void return_arena(Arena arena) { pool().give(std::move(arena)); }
size_t idle_arena_bytes() { return pool().idle_bytes(); }
size_t arena_budget() { return pool().budget(); }
void set_arena_budget(size_t bytes) { pool().set_budget(bytes, false); }
void use_default_arena_budget(size_t bytes) { pool().set_budget(bytes, true); }
void release_idle_arenas() { pool().release(); }

}  // namespace onnxtrain
