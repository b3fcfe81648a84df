// Unique: the distinct elements of X (or, with `axis`, the distinct slices along it), sorted
// ascending or in order of first occurrence, with the index of each one's first occurrence, the
// index in Y of every element (slice) of X, and the counts. Like torch.unique it has no gradient.
//
// Slices compare lexicographically in row-major order of their elements, as np.unique(axis=)
// does after moving the axis to the front.
#include <algorithm>
#include <numeric>

#include "opdef/op_registry.h"
#include "ops/tensor/indexing.h"

namespace onnxtrain {
namespace {

class UniqueKernel final : public Kernel {
 public:
  explicit UniqueKernel(const KernelInfo& info)
      : has_axis_(info.node.has_attr("axis")),
        axis_(info.node.attr_int("axis", 0)),
        sorted_(info.node.attr_int("sorted", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    // X seen as [outer, count, inner]: slice i is every x[o, i, k].
    int64_t outer = 1, count = x.numel(), inner = 1;
    int axis = 0;
    if (has_axis_) {
      OT_CHECK(x.rank() >= 1, "Unique: axis needs an input of rank >= 1, got ", x.str());
      axis = normalize_axis(axis_, x.rank(), "Unique");
      outer = x.shape().size_between(0, axis);
      count = x.dim(axis);
      inner = x.shape().size_between(axis + 1, x.rank());
    }
    dispatch_all(x.dtype(), "Unique", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* v = x.data<T>();
      auto at = [&](int64_t slice, int64_t e) { return v[((e / inner) * count + slice) * inner + e % inner]; };
      const int64_t slice_size = outer * inner;
      auto less = [&](int64_t a, int64_t b) {
        for (int64_t e = 0; e < slice_size; ++e) {
          const T va = at(a, e), vb = at(b, e);
          if (va < vb) return true;
          if (vb < va) return false;
        }
        return false;
      };
      std::vector<int64_t> order(static_cast<size_t>(count));
      std::iota(order.begin(), order.end(), int64_t{0});
      // Stable: among equal slices the first occurrence leads its group.
      std::stable_sort(order.begin(), order.end(), less);
      // Groups of equal slices in sorted order: each group's first member is its first occurrence.
      std::vector<int64_t> group_first, group_count, group_of(static_cast<size_t>(count));
      for (size_t k = 0; k < order.size(); ++k) {
        if (k == 0 || less(order[k - 1], order[k])) {
          group_first.push_back(order[k]);
          group_count.push_back(0);
        }
        group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(group_first.size()) - 1;
        ++group_count.back();
      }
      const int64_t unique = static_cast<int64_t>(group_first.size());
      // rank[g]: the position of group g in Y.
      std::vector<int64_t> rank(static_cast<size_t>(unique));
      std::iota(rank.begin(), rank.end(), int64_t{0});
      if (!sorted_) {
        std::vector<int64_t> by_occurrence(rank);
        std::sort(by_occurrence.begin(), by_occurrence.end(),
                  [&](int64_t a, int64_t b) { return group_first[a] < group_first[b]; });
        for (int64_t p = 0; p < unique; ++p) rank[by_occurrence[p]] = p;
      }
      TensorShape y_shape{unique};
      if (has_axis_) {
        y_shape = x.shape();
        y_shape[axis] = unique;
      }
      Tensor& y = ctx.allocate_output(0, x.dtype(), y_shape);
      T* yv = y.data<T>();
      std::vector<int64_t> first(static_cast<size_t>(unique)), counts(static_cast<size_t>(unique));
      for (int64_t g = 0; g < unique; ++g) {
        const int64_t p = rank[g];
        first[p] = group_first[g];
        counts[p] = group_count[g];
        for (int64_t e = 0; e < slice_size; ++e)
          yv[((e / inner) * unique + p) * inner + e % inner] = at(group_first[g], e);
      }
      auto write = [&](int i, const std::vector<int64_t>& values) {
        if (i >= ctx.num_outputs() || !ctx.output_needed(i)) return;
        Tensor& out = ctx.allocate_output(i, DType::Int64, TensorShape{static_cast<int64_t>(values.size())});
        std::copy(values.begin(), values.end(), out.data<int64_t>());
      };
      write(1, first);
      std::vector<int64_t> inverse(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) inverse[i] = rank[group_of[i]];
      write(2, inverse);
      write(3, counts);
    });
  }

 private:
  bool has_axis_;
  int64_t axis_;
  bool sorted_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Unique", kernel_factory<UniqueKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
