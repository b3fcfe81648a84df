// ArgMax and ArgMin: int64 indices of the first (or, with select_last_index, the last) extremum
// along an axis. Forward only: the outputs are integers.
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/common/reduce.h"

namespace onnxtrain {
namespace {

template <bool kMax>
class ArgExtremumKernel final : public Kernel {
 public:
  explicit ArgExtremumKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)),
        keepdims_(info.node.attr_int("keepdims", 1) != 0),
        last_(info.opset >= 12 && info.node.attr_int("select_last_index", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const char* name = kMax ? "ArgMax" : "ArgMin";
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 1, "the input must have rank >= 1, got ", x.str());
    const int axis = normalize_axis(axis_, x.rank(), name);
    OT_CHECK(x.dim(axis) > 0, "cannot take the ", name, " of an empty axis ", axis_, " of ", x.str());
    TensorShape shape = x.shape();
    if (keepdims_) shape[axis] = 1;
    else shape.erase(axis);
    Tensor& y = ctx.allocate_output(0, DType::Int64, shape);
    const AxisSplit s = split_at_axis(x.shape(), axis);
    dispatch_numeric(x.dtype(), name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      int64_t* py = y.data<int64_t>();
      const bool last = last_;
      // NaN counts as the extremum (the first one found, or the last with select_last_index),
      // as numpy and PyTorch do; `v != v` folds away for integers.
      auto better = [last](T v, T best) {
        if (best != best) return last && v != v;
        if (v != v) return true;
        if constexpr (kMax) return last ? v >= best : v > best;
        else return last ? v <= best : v < best;
      };
      ctx.threads().parallel_for(s.outer * s.inner, std::max<int64_t>(1, kParallelGrain / s.n),
                                 [&](int64_t b, int64_t e) {
                                   for (int64_t t = b; t < e; ++t) {
                                     const int64_t o = t / s.inner, i = t % s.inner;
                                     const T* p = px + o * s.n * s.inner + i;
                                     T best = p[0];
                                     int64_t index = 0;
                                     for (int64_t k = 1; k < s.n; ++k) {
                                       const T v = p[k * s.inner];
                                       if (better(v, best)) {
                                         best = v;
                                         index = k;
                                       }
                                     }
                                     py[t] = index;
                                   }
                                 });
    });
  }

 private:
  int64_t axis_;
  bool keepdims_;
  bool last_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "ArgMax", kernel_factory<ArgExtremumKernel<true>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ArgMin", kernel_factory<ArgExtremumKernel<false>>(), Recompute::Costly, Rounding::PerValue);

static AuditedOutput arg_extremum_audited_output(const Node&, size_t) { return AuditedOutput::SelectedIndex; }
ONNXTRAIN_AUDITED_OUTPUTS("", "ArgMax", arg_extremum_audited_output);
ONNXTRAIN_AUDITED_OUTPUTS("", "ArgMin", arg_extremum_audited_output);

}  // namespace onnxtrain
