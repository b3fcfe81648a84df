#include "ops/common/reduce.h"

namespace onnxtrain {

ReduceGroups reduce_groups(const TensorShape& in, const std::vector<bool>& reduce) {
  OT_CHECK(static_cast<int>(reduce.size()) == in.rank(), "reduce_groups: ", reduce.size(), " axis flags for ",
           in.str());
  ReduceGroups g;
  for (int d = 0; d < in.rank(); ++d) {
    g.in_numel *= in[d];
    if (!reduce[d]) g.out_numel *= in[d];
    if (in[d] == 1) continue;  // neutral either way
    if (g.count > 0 && g.reduced[g.count - 1] == reduce[d]) {
      g.size[g.count - 1] *= in[d];
    } else {
      g.size[g.count] = in[d];
      g.reduced[g.count] = reduce[d];
      ++g.count;
    }
  }
  return g;
}

int64_t reduce_scratch_elems(const ReduceGroups& g) {
  if (g.in_numel == 0 || g.out_numel == 0) return 0;
  // Folds run innermost reduced group first, alternating between two intermediates; the last
  // fold writes into the output.
  int64_t after[2] = {0, 0}, remaining = g.in_numel;
  int folds = 0;
  for (int i = g.count - 1; i >= 0; --i) {
    if (!g.reduced[i]) continue;
    remaining /= g.size[i];
    if (folds < 2) after[folds] = remaining;
    ++folds;
  }
  if (folds <= 1) return 0;
  return folds == 2 ? after[0] : after[0] + after[1];
}

AxisSplit split_at_axis(const TensorShape& shape, int axis) {
  return {shape.size_between(0, axis), shape[axis], shape.size_between(axis + 1, shape.rank())};
}

AxisSplit split_flatten_from(const TensorShape& shape, int axis) {
  return {shape.size_between(0, axis), shape.size_between(axis, shape.rank()), 1};
}

TensorShape reduced_shape(const TensorShape& in, const std::vector<bool>& reduce, bool keepdims) {
  TensorShape out;
  for (int d = 0; d < in.rank(); ++d) {
    if (!reduce[d]) out.push_back(in[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

template <typename T>
void reduce_sum(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<bool>& reduce, T* out) {
  ReduceGroups g = reduce_groups(in_shape, reduce);
  std::vector<T> scratch(static_cast<size_t>(reduce_scratch_elems(g)));
  reduce_axes(pool, in, g, out, scratch.empty() ? nullptr : scratch.data(), SumOp<T>{});
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
