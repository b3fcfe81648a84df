#pragma once
// Reuse of large buffers. Tensors handed to PyTorch (outputs, gradients) need memory of their own
// on every step; fresh large blocks come from mmap and cost a page fault per 4 KiB on first touch,
// which dominated kernels writing them. Freed blocks are kept by exact size and handed out again,
// so a training loop that allocates the same shapes every step stops faulting after the first.
#include <cstddef>
#include <memory>

namespace onnxtrain {

// Blocks of at least this many bytes are cached; smaller ones come from malloc, which reuses them
// well on its own.
inline constexpr size_t kCachedBufferMinBytes = 64 * 1024;

// A 64-byte aligned block; returned to the cache (or freed, beyond the cache's limit) when the
// last owner lets go.
std::shared_ptr<void> allocate_buffer(size_t bytes);

// A block for large memory: 64-byte aligned, and for 2 MiB and more a mapping of its own, which
// turns into transparent huge pages in the background once its first user has faulted it in
// (core/huge_pages.h). Release with free_large and the same size.
void* allocate_large(size_t bytes);
void free_large(void* p, size_t bytes);

// A block that goes straight back to the system when freed: for memory that will not be needed
// in this size again (a recording run's intermediates, which later runs take from an arena).
std::shared_ptr<void> allocate_uncached(size_t bytes);

// Bytes currently held for reuse, and the limit (ONNXTRAIN_BUFFER_CACHE_MB, default 1024, or
// set_buffer_cache_limit); past the limit the least recently freed blocks go back to the system.
size_t cached_buffer_bytes();
size_t buffer_cache_limit();
void set_buffer_cache_limit(size_t bytes);
void release_cached_buffers();

}  // namespace onnxtrain
