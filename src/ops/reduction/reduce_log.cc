// ReduceLogSum and ReduceLogSumExp (shifted by the maximum, so it neither overflows nor
// underflows), their gradients and backward kernels.
#include <cmath>
#include <limits>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/reduction/reduce_common.h"

namespace onnxtrain {
namespace {

template <typename T>
struct MaxIgnoringNanOp {
  T identity = -std::numeric_limits<T>::infinity();
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return a > b ? a : b; }
};

struct ReduceLogSumImpl {
  static constexpr const char* kName = "ReduceLogSum";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_float(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumOp<T>{}, [](T v, int64_t) { return std::log(v); });
    });
  }
};

class ReduceLogSumExpKernel final : public Kernel {
 public:
  explicit ReduceLogSumExpKernel(const KernelInfo& info) : axes_(info, kReduceAxesInputSince, "ReduceLogSumExp") {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<bool> reduce;
    if (!axes_.resolve(ctx, x.shape(), reduce)) {
      ctx.alias_input(0, 0, x.shape());
      return;
    }
    ReduceGroups groups = reduce_groups(x.shape(), reduce);
    const TensorShape kept = reduced_shape(x.shape(), reduce, true);
    Tensor& y = ctx.allocate_output(0, x.dtype(), reduced_shape(x.shape(), reduce, axes_.keepdims()));
    dispatch_float(x.dtype(), "ReduceLogSumExp", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t n = x.numel(), m = groups.out_numel, extra = reduce_scratch_elems(groups);
      T* mem = static_cast<T*>(ctx.scratch(static_cast<size_t>(m + n + extra) * sizeof(T)));
      T* tmp = extra ? mem + m + n : nullptr;
      // shift = the maximum, or 0 where it is infinite (all -inf gives log(0) = -inf, as numpy).
      T* shift = mem;
      reduce_axes(ctx.threads(), x.data<T>(), groups, shift, tmp, MaxIgnoringNanOp<T>{});
      for (int64_t i = 0; i < m; ++i) shift[i] = std::isfinite(shift[i]) ? shift[i] : T(0);
      Tensor shift_t(x.dtype(), kept, shift), e(x.dtype(), x.shape(), mem + m);
      map_over_input<T>(ctx.threads(), x, shift_t, shift_t, e, [](T xv, T s, T) { return std::exp(xv - s); });
      T* out = y.data<T>();
      reduce_axes(ctx.threads(), e.data<T>(), groups, out, tmp, SumOp<T>{});
      for (int64_t i = 0; i < m; ++i) out[i] = std::log(out[i]) + shift[i];
    });
  }

 private:
  ReduceAxes axes_;
};

// Inputs: dY, X, Y (dY and Y keepdims-shaped). dX = dY exp(X - Y), the softmax over the group.
void reduce_log_sum_exp_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_float(x.dtype(), "ReduceLogSumExpGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_over_input<T>(ctx.threads(), x, dy, y, dx, [](T xv, T g, T yv) { return g * std::exp(xv - yv); });
  });
}

// Inputs: dY, Y (same shape). Returns dY / exp(Y) = dY / sum, still to be broadcast to X.
void reduce_log_sum_grad(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "ReduceLogSumGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T g, T yv) { return g * std::exp(-yv); });
  });
}

void reduce_log_sum_exp_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string y = reduced_keepdims(g, g.output(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceLogSumExpGrad", {dy, g.input(0), y}, {}, kOnnxTrainDomain));
}

// Y = log S, so dX = dY / S broadcast: needs only Y, not X.
void reduce_log_sum_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string y = reduced_keepdims(g, g.output(0), kReduceAxesInputSince);
  g.set_input_grad(0, expand_to_input(g, g.op("ReduceLogSumGrad", {dy, y}, {}, kOnnxTrainDomain)));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReduceLogSum", kernel_factory<ReduceKernel<ReduceLogSumImpl>>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ReduceLogSumExp", kernel_factory<ReduceLogSumExpKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceLogSumExpGrad", kernel_factory(&reduce_log_sum_exp_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceLogSumGrad", kernel_factory(&reduce_log_sum_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "ReduceLogSum", reduce_log_sum_gradient);
ONNXTRAIN_GRADIENT("", "ReduceLogSumExp", reduce_log_sum_exp_gradient);

}  // namespace onnxtrain
