#include "core/buffer_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/huge_pages.h"

namespace onnxtrain {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kHugePage = 2 << 20;

// Freed blocks by exact size, evicted least recently freed first once they pass the limit.
class BufferCache {
 public:
  BufferCache() {
    const char* env = std::getenv("ONNXTRAIN_BUFFER_CACHE_MB");
    limit_ = (env ? static_cast<size_t>(std::atoll(env)) : 1024) << 20;
  }
  ~BufferCache() { release(); }

  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = by_size_.find(bytes);
      if (it != by_size_.end() && !it->second.empty()) {
        auto block = it->second.back();  // the most recently freed: likeliest still in cache
        it->second.pop_back();
        void* p = block->pointer;
        held_ -= bytes;
        lru_.erase(block);
        return p;
      }
    }
    return allocate_large(bytes);
  }

  void give(void* p, size_t bytes) {
    std::vector<Block> evicted;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bytes > limit_) {
        evicted.push_back({p, bytes});
      } else {
        lru_.push_back({p, bytes});
        by_size_[bytes].push_back(std::prev(lru_.end()));
        held_ += bytes;
        evict_to(limit_, evicted);
      }
    }
    for (const Block& b : evicted) free_large(b.pointer, b.bytes);
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
    }
    trim_to(bytes);
  }

  size_t limit() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }

  void release() { trim_to(0); }

 private:
  struct Block {
    void* pointer;
    size_t bytes;
  };

  void trim_to(size_t bytes) {
    std::vector<Block> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      evict_to(bytes, evicted);
    }
    for (const Block& b : evicted) free_large(b.pointer, b.bytes);
  }

  void evict_to(size_t limit, std::vector<Block>& evicted) {
    while (held_ > limit && !lru_.empty()) {
      Block oldest = lru_.front();
      auto& same_size = by_size_[oldest.bytes];
      same_size.erase(same_size.begin());  // blocks of one size are freed, and listed, in order
      if (same_size.empty()) by_size_.erase(oldest.bytes);
      lru_.pop_front();
      held_ -= oldest.bytes;
      evicted.push_back(oldest);
    }
  }

  std::mutex mutex_;
  std::list<Block> lru_;  // front: least recently freed
  std::unordered_map<size_t, std::vector<std::list<Block>::iterator>> by_size_;
  size_t held_ = 0;
  size_t limit_ = 0;
};

// Never destroyed: blocks may be returned by PyTorch after static destructors ran.
BufferCache& cache() {
  static BufferCache* c = new BufferCache();
  return *c;
}

}  // namespace

void* allocate_large(size_t bytes) {
  const size_t padded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (bytes < kHugePage) {
    void* p = std::aligned_alloc(kAlign, padded);
    OT_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    return p;
  }
  // A mapping of its own: unmapping returns it to the system at once, where glibc would keep
  // freed large blocks in its heap once its mmap threshold has adapted to their size.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  OT_CHECK(p != MAP_FAILED, "out of memory mapping ", bytes, " bytes");
  // Faulted in by its first user in small pages; huge ones come afterwards, off that user's path.
  collapse_to_huge_pages_later(static_cast<uint8_t*>(p), bytes);
  return p;
}

void free_large(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kHugePage)
    std::free(p);
  else {
    forget_huge_page_collapse(static_cast<uint8_t*>(p), bytes);
    munmap(p, bytes);
  }
}

std::shared_ptr<void> allocate_buffer(size_t bytes) {
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  if (rounded < kCachedBufferMinBytes) {
    void* p = std::aligned_alloc(kAlign, rounded);
    OT_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void* p = cache().take(rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) { cache().give(q, rounded); });
}

std::shared_ptr<void> allocate_uncached(size_t bytes) {
  // Blocks of 64 KiB and more are mapped directly: from malloc, a recording run's hundreds of
  // short-lived blocks raise glibc's mmap threshold and end up fragmenting the heap, whose pages
  // then stay resident (30-40 MB above the plan's arena on resnet18).
  if (bytes >= kCachedBufferMinBytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    OT_CHECK(p != MAP_FAILED, "out of memory mapping ", bytes, " bytes");
    return std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); });
  }
  return std::shared_ptr<void>(allocate_large(bytes), [bytes](void* q) { free_large(q, bytes); });
}

size_t cached_buffer_bytes() { return cache().held(); }
size_t buffer_cache_limit() { return cache().limit(); }
void set_buffer_cache_limit(size_t bytes) { cache().set_limit(bytes); }

void release_cached_buffers() { cache().release(); }

}  // namespace onnxtrain
