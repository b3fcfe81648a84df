#pragma once
// A map that keeps at most `limit` entries, the least recently used going first: the per-shape
// caches of JIT-compiled oneDNN kernels (convolution plans, bfloat16 matmul primitives), where a
// run over many shapes would otherwise keep every one's kernels. Not thread-safe: the caller
// holds its own lock. Values are typically shared_ptrs, so that an evicted entry stays alive
// while a caller still runs it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace onnxtrain {

template <typename Key, typename Value>
class LruMap {
 public:
  explicit LruMap(size_t limit) : limit_(limit) {}

  // The entry for key, built by build() when absent (evicting the least recently used first).
  template <typename Build>
  Value& get_or_build(const Key& key, Build&& build) {
    auto found = entries_.find(key);
    if (found == entries_.end()) {
      if (entries_.size() >= limit_ && !entries_.empty())
        entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
          return a.second.last_used < b.second.last_used;
        }));
      found = entries_.emplace(key, Entry{build(), 0}).first;
    }
    found->second.last_used = ++clock_;
    return found->second.value;
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Value value;
    uint64_t last_used;
  };
  std::map<Key, Entry> entries_;
  uint64_t clock_ = 0;
  size_t limit_;
};

}  // namespace onnxtrain
