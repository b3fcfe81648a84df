#include "ops/common/reduce.h"

#include <cstring>

#include "ops/common/elementwise.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// out[o, i] = sum_r in[o, r, i]; the three-group pattern every reduction is brought into.
template <typename T>
void reduce_middle(ThreadPool& pool, const T* in, int64_t outer, int64_t r, int64_t inner, T* out) {
  if (inner == 1) {
    pool.parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const T* p = in + o * r;
        T acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += p[k];
        out[o] = acc;
      }
    });
    return;
  }
  // Rows of length `inner` accumulate into the output row; split over outer and inner columns.
  const int64_t col_block = 256;
  const int64_t blocks = (inner + col_block - 1) / col_block;
  pool.parallel_for(outer * blocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r * col_block, 1)),
                    [&](int64_t t0, int64_t t1) {
                      for (int64_t t = t0; t < t1; ++t) {
                        int64_t o = t / blocks, c0 = (t % blocks) * col_block;
                        int64_t c1 = std::min(inner, c0 + col_block);
                        T* dst = out + o * inner;
                        const T* src = in + o * r * inner;
                        for (int64_t c = c0; c < c1; ++c) dst[c] = src[c];
                        for (int64_t k = 1; k < r; ++k) {
                          const T* row = src + k * inner;
                          for (int64_t c = c0; c < c1; ++c) dst[c] += row[c];
                        }
                      }
                    });
}

}  // namespace

template <typename T>
void reduce_sum(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<bool>& reduce, T* out) {
  // Collapse into alternating groups of kept and reduced dims (size-1 dims are neutral).
  std::vector<int64_t> sizes;
  std::vector<bool> is_reduced;
  for (int d = 0; d < in_shape.rank(); ++d) {
    if (in_shape[d] == 1) continue;
    if (!sizes.empty() && is_reduced.back() == reduce[d]) {
      sizes.back() *= in_shape[d];
    } else {
      sizes.push_back(in_shape[d]);
      is_reduced.push_back(reduce[d]);
    }
  }
  const int64_t total = in_shape.numel();
  if (total == 0) {
    int64_t out_n = 1;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (!is_reduced[i]) out_n *= sizes[i];
    std::fill(out, out + out_n, T(0));
    return;
  }
  // Reduce the innermost reduced group first; repeat on the (smaller) result until none is left.
  std::vector<T> tmp;
  const T* src = in;
  while (true) {
    int last_r = -1;
    for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i)
      if (is_reduced[i]) {
        last_r = i;
        break;
      }
    if (last_r < 0) {
      int64_t n = 1;
      for (int64_t s : sizes) n *= s;
      if (src != out) std::memcpy(out, src, static_cast<size_t>(n) * sizeof(T));
      return;
    }
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < last_r; ++i) outer *= sizes[i];
    for (size_t i = last_r + 1; i < sizes.size(); ++i) inner *= sizes[i];
    bool more = false;
    for (int i = 0; i < last_r; ++i) more = more || is_reduced[i];
    std::vector<T> next;
    T* dst = out;
    if (more) {
      next.resize(static_cast<size_t>(outer * inner));
      dst = next.data();
    }
    reduce_middle(pool, src, outer, sizes[last_r], inner, dst);
    sizes.erase(sizes.begin() + last_r);
    is_reduced.erase(is_reduced.begin() + last_r);
    if (!more) return;
    tmp.swap(next);
    src = tmp.data();
  }
}

std::vector<bool> axes_to_reduce_to(const TensorShape& from, const TensorShape& to, const char* what) {
  OT_CHECK(to.rank() <= from.rank(), what, ": cannot sum ", from.str(), " down to ", to.str());
  std::vector<bool> reduce(static_cast<size_t>(from.rank()), false);
  int offset = from.rank() - to.rank();
  for (int d = 0; d < from.rank(); ++d) {
    if (d < offset) {
      reduce[d] = true;
      continue;
    }
    int64_t t = to[d - offset];
    OT_CHECK(t == from[d] || t == 1, what, ": cannot sum ", from.str(), " down to ", to.str());
    reduce[d] = t == 1 && from[d] != 1;
  }
  return reduce;
}

#define OT_INSTANTIATE(T) \
  template void reduce_sum<T>(ThreadPool&, const T*, const TensorShape&, const std::vector<bool>&, T*);
OT_INSTANTIATE(float)
OT_INSTANTIATE(double)
OT_INSTANTIATE(int64_t)
OT_INSTANTIATE(int32_t)
#undef OT_INSTANTIATE

}  // namespace onnxtrain
