#pragma once
// Reductions over an arbitrary set of axes. The axes are collapsed into alternating groups of kept
// and reduced dims; the reduced groups are then folded one at a time, innermost first, each as
// out[o, i] = combine over k of in[o, k, i]. Every Reduce* op, the losses, and the sum of
// gradients down to a broadcast input's shape go through here.
//
// An Op supplies `T identity` (the value of an empty reduction), `T pre(T)` (applied once to each
// input element: |x|, x*x, ...) and `T combine(T, T)`. Written as value selects and plain
// arithmetic so that the lane loops below vectorize.
#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

struct ReduceGroups {
  int count = 0;  // number of groups; size-1 dims are dropped, adjacent groups of a kind merged
  std::array<int64_t, TensorShape::kMaxRank> size{};
  std::array<bool, TensorShape::kMaxRank> reduced{};
  int64_t in_numel = 1;
  int64_t out_numel = 1;
};

ReduceGroups reduce_groups(const TensorShape& in, const std::vector<bool>& reduce);

// Elements of temporary memory reduce_axes needs (intermediates between folds); 0 for one fold.
int64_t reduce_scratch_elems(const ReduceGroups& g);

// A shape seen as [outer, n, inner] around one axis: the layout of every along-an-axis op
// (softmax, arg-extrema, cumulative sums, top-k).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
// n = dim `axis` (already normalized).
AxisSplit split_at_axis(const TensorShape& shape, int axis);
// n = product of the dims from `axis` on, inner = 1: the 2-D coercion of opset < 13 softmax.
AxisSplit split_flatten_from(const TensorShape& shape, int axis);

// Shape of `in` with the reduced dims removed (keepdims false) or set to 1.
TensorShape reduced_shape(const TensorShape& in, const std::vector<bool>& reduce, bool keepdims);

namespace reduce_detail {

inline constexpr int64_t kGrain = 1 << 15;  // elements per parallel task, at least
inline constexpr int64_t kLanes = 64;       // independent accumulators of a contiguous fold

// Folds p[0..n) into one value. Lane accumulators keep the loop free of a serial dependence so
// that it vectorizes (a plain float reduction would not, without -ffast-math). `pre` reads a
// stored In (T itself, or a 16-bit float widened) as a T.
template <typename T, typename In, typename Pre, typename Combine>
T fold_contiguous(const In* p, int64_t n, T identity, const Pre& pre, const Combine& combine) {
  if (n < 2 * kLanes) {
    T acc = identity;
    for (int64_t k = 0; k < n; ++k) acc = combine(acc, pre(p[k]));
    return acc;
  }
  T lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = pre(p[j]);
  int64_t k = kLanes;
  for (; k + kLanes <= n; k += kLanes) {
    const In* q = p + k;
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = combine(lanes[j], pre(q[j]));
  }
  T acc = identity;
  for (; k < n; ++k) acc = combine(acc, pre(p[k]));
  for (int64_t j = 0; j < kLanes; ++j) acc = combine(acc, lanes[j]);
  return acc;
}

// out[o, i] = fold over k of in[o, k, i], for o < outer, k < r (r >= 1), i < inner.
template <typename T, typename In, typename Pre, typename Combine>
void fold_middle(ThreadPool& pool, const In* in, int64_t outer, int64_t r, int64_t inner, T* out, T identity,
                 const Pre& pre, const Combine& combine) {
  if (inner == 1) {
    // One long row: split it, fold the pieces in parallel, then combine the partial results.
    if (outer == 1 && r >= 4 * kGrain && pool.num_threads() > 1) {
      constexpr int64_t kMaxPieces = 64;
      const int64_t pieces = std::min<int64_t>(kMaxPieces, r / kGrain);
      const int64_t len = (r + pieces - 1) / pieces;
      T partial[kMaxPieces];
      pool.parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const int64_t s = c * len, n = std::max<int64_t>(0, std::min(r, s + len) - s);
          partial[c] = fold_contiguous(in + s, n, identity, pre, combine);
        }
      });
      T acc = identity;
      for (int64_t c = 0; c < pieces; ++c) acc = combine(acc, partial[c]);
      out[0] = acc;
      return;
    }
    pool.parallel_for(outer, std::max<int64_t>(1, kGrain / r), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) out[o] = fold_contiguous(in + o * r, r, identity, pre, combine);
    });
    return;
  }
  // Rows of `inner` values fold elementwise into the output row; tasks split outer and columns.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (inner + kCols - 1) / kCols;
  pool.parallel_for(outer * blocks, std::max<int64_t>(1, kGrain / (r * std::min(inner, kCols))),
                    [&](int64_t t0, int64_t t1) {
                      for (int64_t t = t0; t < t1; ++t) {
                        const int64_t o = t / blocks, c0 = (t % blocks) * kCols;
                        const int64_t width = std::min(inner, c0 + kCols) - c0;
                        T* dst = out + o * inner + c0;
                        const In* src = in + o * r * inner + c0;
                        for (int64_t c = 0; c < width; ++c) dst[c] = pre(src[c]);
                        for (int64_t k = 1; k < r; ++k) {
                          const In* row = src + k * inner;
                          for (int64_t c = 0; c < width; ++c) dst[c] = combine(dst[c], pre(row[c]));
                        }
                      }
                    });
}

}  // namespace reduce_detail

// out (g.out_numel elements) = reduction of in over the groups; scratch holds
// reduce_scratch_elems(g) elements (may be null when that is 0). `in` is of T, or of a 16-bit
// float that each value is widened from exactly, once, as it is read (widened_to_float).
template <typename T, typename In, typename Op>
void reduce_axes(ThreadPool& pool, const In* in, const ReduceGroups& g, T* out, T* scratch, const Op& op) {
  static_assert(std::is_same_v<In, T> || kIs16BitFloat<In>, "reduce_axes reads T or a 16-bit float");
  if (g.out_numel == 0) return;
  if (g.in_numel == 0) {  // a reduced dim of size 0: every output is the empty reduction
    std::fill(out, out + g.out_numel, op.identity);
    return;
  }
  auto pre = [&](In v) {
    if constexpr (std::is_same_v<In, T>) return op.pre(v);
    else return op.pre(static_cast<T>(widened_to_float(v)));
  };
  auto same = [](T v) { return v; };
  auto combine = [&](T a, T b) { return op.combine(a, b); };
  int last = -1;
  for (int i = 0; i < g.count; ++i)
    if (g.reduced[i]) last = i;
  if (last < 0) {  // only size-1 dims reduced: an elementwise map
    pool.parallel_for(g.in_numel, reduce_detail::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = pre(in[i]);
    });
    return;
  }
  ReduceGroups cur = g;
  const In* first_src = in;
  const T* src = nullptr;  // after the first fold: its output, of T
  T* buffers[2] = {scratch, nullptr};
  if (scratch) {
    int64_t first = g.in_numel / g.size[last];
    buffers[1] = scratch + first;
  }
  bool first_fold = true;
  for (int fold = 0;; ++fold) {
    int r_index = -1;
    for (int i = cur.count - 1; i >= 0; --i)
      if (cur.reduced[i]) {
        r_index = i;
        break;
      }
    bool more = false;
    for (int i = 0; i < r_index; ++i) more = more || cur.reduced[i];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < r_index; ++i) outer *= cur.size[i];
    for (int i = r_index + 1; i < cur.count; ++i) inner *= cur.size[i];
    T* dst = more ? buffers[fold % 2] : out;
    if (first_fold)
      reduce_detail::fold_middle(pool, first_src, outer, cur.size[r_index], inner, dst, op.identity, pre, combine);
    else
      reduce_detail::fold_middle(pool, src, outer, cur.size[r_index], inner, dst, op.identity, same, combine);
    first_fold = false;
    if (!more) return;
    for (int i = r_index; i + 1 < cur.count; ++i) {
      cur.size[i] = cur.size[i + 1];
      cur.reduced[i] = cur.reduced[i + 1];
    }
    --cur.count;
    src = dst;
  }
}

template <typename T>
struct SumOp {
  T identity = T(0);
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return a + b; }
};

// out[kept dims] = sum of in over the axes with reduce[d] == true. `out` has in's shape with the
// reduced dims removed or set to 1 (same element order either way). Allocates its intermediates;
// kernels call reduce_axes with scratch memory instead.
template <typename T>
void reduce_sum(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<bool>& reduce, T* out);

// Which axes of `from` must be summed to reach the broadcast-compatible shape `to`.
std::vector<bool> axes_to_reduce_to(const TensorShape& from, const TensorShape& to, const char* what);

}  // namespace onnxtrain
