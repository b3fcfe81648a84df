// ReduceMax and ReduceMin, and their shared backward kernel: the gradient is split evenly among
// tied extrema, as PyTorch's amax/amin do (ONNX leaves ties open).
#include <limits>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/reduction/reduce_common.h"

namespace onnxtrain {
namespace {

// NaN wins, as in numpy and PyTorch: `a != a` is false for integers and folds away.
template <typename T>
struct MaxOp {
  T identity = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::lowest();
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return (a > b || a != a) ? a : b; }
};

template <typename T>
struct MinOp {
  T identity = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::max();
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return (a < b || a != a) ? a : b; }
};

// ReduceMax/ReduceMin take every integer type: ONNX lists int8 and uint8 (opset 12+), and
// torch's amax/amin/max of int16 and other integer tensors export to them as well.
// The 16-bit floats are read as they are (an extremum is one of its inputs, exact in float32).
template <typename Fn>
void dispatch_minmax(DType t, const char* what, Fn&& fn) {
  if (t == DType::BFloat16) return fn(TypeTag<BHalf>{});
  if (t == DType::Float16) return fn(TypeTag<Half>{});
  if (t == DType::Float32 || t == DType::Float64) return dispatch_reduce(t, what, std::forward<Fn>(fn));
  dispatch_numeric(t, what, std::forward<Fn>(fn));
}

struct ReduceMaxImpl {
  static constexpr const char* kName = "ReduceMax";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_minmax(ctx.input(0).dtype(), kName, [&](auto tag) {
      using S = typename decltype(tag)::type;
      run_reduce<S>(ctx, axes, MaxOp<ComputeType<S>>{});
    });
  }
};

struct ReduceMinImpl {
  static constexpr const char* kName = "ReduceMin";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_minmax(ctx.input(0).dtype(), kName, [&](auto tag) {
      using S = typename decltype(tag)::type;
      run_reduce<S>(ctx, axes, MinOp<ComputeType<S>>{});
    });
  }
};

// Inputs: dY, X, Y (dY and Y keepdims-shaped). dX = dY / count where X equals Y, else 0, with
// count the number of elements tied at the extremum in X's reduced group.
void reduce_extremum_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  OT_CHECK(dy.shape() == y.shape(), "dY ", dy.str(), " and Y ", y.str(), " must have the same shape");
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  ReduceGroups groups = reduce_groups(x.shape(), axes_to_reduce_to(x.shape(), y.shape(), "ReduceMaxGrad"));
  dispatch_float(x.dtype(), "ReduceMaxGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel(), m = y.numel(), extra = reduce_scratch_elems(groups);
    T* mem = static_cast<T*>(ctx.scratch(static_cast<size_t>(n + m + extra) * sizeof(T)));
    Tensor mask(x.dtype(), x.shape(), mem);
    Tensor share(x.dtype(), y.shape(), mem + n);
    map_over_input<T>(ctx.threads(), x, y, y, mask, [](T xv, T yv, T) { return xv == yv ? T(1) : T(0); });
    T* count = share.template data<T>();
    reduce_axes(ctx.threads(), mask.template data<T>(), groups, count, extra ? mem + n + m : nullptr, SumOp<T>{});
    const T* pdy = dy.data<T>();
    // PyTorch's scale_grad_by_count: (dY / count) * mask. A NaN extremum equals nothing, so its
    // group has count 0 and its whole gradient is NaN, as in eager.
    for (int64_t i = 0; i < m; ++i) count[i] = pdy[i] / count[i];
    map_over_input<T>(ctx.threads(), x, share, y, dx,
                      [](T xv, T s, T yv) { return s * (xv == yv ? T(1) : T(0)); });
  });
}

void reduce_extremum_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string y = reduced_keepdims(g, g.output(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceMaxGrad", {dy, g.input(0), y}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReduceMax", kernel_factory<ReduceKernel<ReduceMaxImpl>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ReduceMin", kernel_factory<ReduceKernel<ReduceMinImpl>>(), Recompute::Costly, Rounding::PerValue);
// Max and min share it: only "equal to the reduced value" matters.
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceMaxGrad", kernel_factory(&reduce_extremum_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "ReduceMax", reduce_extremum_gradient);
ONNXTRAIN_GRADIENT("", "ReduceMin", reduce_extremum_gradient);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "ReduceMax", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "ReduceMin", kBothHalfFloats);

}  // namespace onnxtrain
