// The sum-shaped reductions: ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1, ReduceL2, their
// gradients, and the backward kernels ReduceL1Grad and ReduceL2Grad.
#include <cmath>
#include <limits>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/reduction/reduce_common.h"

namespace onnxtrain {
namespace {

template <typename T>
struct SumSquareOp {
  T identity = T(0);
  T pre(T v) const { return v * v; }
  T combine(T a, T b) const { return a + b; }
};

template <typename T>
struct SumAbsOp {
  T identity = T(0);
  T pre(T v) const { return v < T(0) ? T(-v) : v; }
  T combine(T a, T b) const { return a + b; }
};

struct ReduceSumImpl {
  static constexpr const char* kName = "ReduceSum";
  static constexpr int kAxesInputSince = kReduceSumAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_reduce(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumOp<T>{});
    });
  }
};

struct ReduceMeanImpl {
  static constexpr const char* kName = "ReduceMean";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_reduce(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumOp<T>{}, [](T v, int64_t n) {
        // The mean of nothing is NaN, as in numpy; integers have no NaN and give 0.
        if constexpr (std::is_integral_v<T>) return n == 0 ? T(0) : static_cast<T>(v / n);
        else return n == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(v / static_cast<T>(n));
      });
    });
  }
};

struct ReduceSumSquareImpl {
  static constexpr const char* kName = "ReduceSumSquare";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_reduce(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumSquareOp<T>{});
    });
  }
};

struct ReduceL1Impl {
  static constexpr const char* kName = "ReduceL1";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_reduce(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumAbsOp<T>{});
    });
  }
};

struct ReduceL2Impl {
  static constexpr const char* kName = "ReduceL2";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_float(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, SumSquareOp<T>{}, [](T v, int64_t) { return std::sqrt(v); });
    });
  }
};

// Inputs: dY (keepdims-shaped), X. dX = dY * sign(X); sign(0) = 0 as in PyTorch's abs/norm.
void reduce_l1_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_float(x.dtype(), "ReduceL1Grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_over_input<T>(ctx.threads(), x, dy, dy, dx, [](T xv, T g, T) {
      return xv > T(0) ? g : (xv < T(0) ? T(-g) : T(0));
    });
  });
}

// Inputs: dY, X, Y (both keepdims-shaped). dX = dY * X / Y, and 0 where Y = 0: PyTorch's norm
// backward masks the zero norm the same way instead of producing NaN.
void reduce_l2_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_float(x.dtype(), "ReduceL2Grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_over_input<T>(ctx.threads(), x, dy, y, dx, [](T xv, T g, T yv) {
      return yv == T(0) ? T(0) : xv * (g / yv);
    });
  });
}

void reduce_sum_gradient(GradBuilder& g) {
  if (reduce_is_identity(g, kReduceSumAxesInputSince)) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  g.set_input_grad(0, expand_to_input(g, reduced_keepdims(g, g.output_grad(0), kReduceSumAxesInputSince)));
}

// dX = dY / n broadcast, n = numel(X) / numel(Y), computed at run time since shapes are dynamic.
void reduce_mean_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  const int to = static_cast<int>(g.dtype_of(dy));
  std::string numel_x = g.op("ReduceProd", {g.shape_of(g.input(0))}, {{"keepdims", Attribute::of_int(0)}});
  std::string numel_y = g.op("Size", {dy});
  std::string n = g.op("Div", {g.op("Cast", {numel_x}, {{"to", Attribute::of_int(to)}}),
                               g.op("Cast", {numel_y}, {{"to", Attribute::of_int(to)}})});
  std::string scaled = g.op("Div", {reduced_keepdims(g, dy, kReduceAxesInputSince), n});
  g.set_input_grad(0, expand_to_input(g, scaled));
}

// dX = 2 X dY: one broadcasting Mul against the (small) doubled dY.
void reduce_sum_square_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string two_dy = g.op("Mul", {dy, g.scalar_like(2.0, dy)});
  g.set_input_grad(0, g.op("Mul", {g.input(0), two_dy}));
}

void reduce_l1_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceL1Grad", {dy, g.input(0)}, {}, kOnnxTrainDomain));
}

void reduce_l2_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string y = reduced_keepdims(g, g.output(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceL2Grad", {dy, g.input(0), y}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReduceSum", kernel_factory<ReduceKernel<ReduceSumImpl>>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "ReduceMean", kernel_factory<ReduceKernel<ReduceMeanImpl>>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "ReduceSumSquare", kernel_factory<ReduceKernel<ReduceSumSquareImpl>>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "ReduceL1", kernel_factory<ReduceKernel<ReduceL1Impl>>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "ReduceL2", kernel_factory<ReduceKernel<ReduceL2Impl>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceL1Grad", kernel_factory(&reduce_l1_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceL2Grad", kernel_factory(&reduce_l2_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "ReduceSum", reduce_sum_gradient);
ONNXTRAIN_GRADIENT("", "ReduceMean", reduce_mean_gradient);
ONNXTRAIN_GRADIENT("", "ReduceSumSquare", reduce_sum_square_gradient);
ONNXTRAIN_GRADIENT("", "ReduceL1", reduce_l1_gradient);
ONNXTRAIN_GRADIENT("", "ReduceL2", reduce_l2_gradient);

}  // namespace onnxtrain
