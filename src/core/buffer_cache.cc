#include "core/buffer_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace onnxtrain {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kHugePage = 2 << 20;

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
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        held_ -= bytes;
        return p;
      }
    }
    return allocate_large(bytes);
  }

  void give(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_ + bytes <= limit_) {
        free_[bytes].push_back(p);
        held_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& kv : free_)
      for (void* p : kv.second) std::free(p);
    free_.clear();
    held_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
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
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes < kHugePage) {
    void* p = std::aligned_alloc(kAlign, padded);
    OT_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    return p;
  }
  void* p = std::aligned_alloc(kHugePage, padded);
  OT_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  // Only the huge pages that lie wholly inside the block: a huge page is resident in full once
  // any byte of it is touched, so covering the tail would cost up to 2 MiB of RSS for nothing.
  madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: without THP, 4 KiB pages
  return p;
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
  return std::shared_ptr<void>(allocate_large(std::max<size_t>(bytes, 1)), [](void* q) { std::free(q); });
}

size_t cached_buffer_bytes() { return cache().held(); }

void release_cached_buffers() { cache().release(); }

}  // namespace onnxtrain
