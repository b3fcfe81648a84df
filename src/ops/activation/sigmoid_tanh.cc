// Sigmoid and Tanh, whose gradients are functions of the output alone. float32 runs the
// vectorized forms of ops/math/fast_math.h (SiLU and tanh-GELU reach us as these).
#include <cmath>

#include "autodiff/grad_builder.h"
#include "ops/common/elementwise.h"
#include "ops/activation/silu_math.h"
#include "ops/math/fast_math.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

void sigmoid(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::Float32) {
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    fast_sigmoid(ctx.threads(), x.data<float>(), y.data<float>(), x.numel());
    return;
  }
  dispatch_float(ctx.input(0).dtype(), "Sigmoid", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return silu_math::sigmoid(x); });
  });
}

void tanh_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::Float32) {
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    fast_tanh(ctx.threads(), x.data<float>(), y.data<float>(), x.numel());
    return;
  }
  dispatch_float(ctx.input(0).dtype(), "Tanh", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return std::tanh(x); });
  });
}

// Inputs: dY, Y.
void sigmoid_grad(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "SigmoidGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T dy, T y) { return dy * y * (T(1) - y); });
  });
}

void tanh_grad(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "TanhGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T dy, T y) { return dy * (T(1) - y * y); });
  });
}

void sigmoid_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("SigmoidGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}

void tanh_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("TanhGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Sigmoid", kernel_factory(&sigmoid));
ONNXTRAIN_KERNEL("", "Tanh", kernel_factory(&tanh_kernel));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SigmoidGrad", kernel_factory(&sigmoid_grad));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "TanhGrad", kernel_factory(&tanh_grad));
ONNXTRAIN_GRADIENT("", "Sigmoid", sigmoid_gradient);
ONNXTRAIN_GRADIENT("", "Tanh", tanh_gradient);

}  // namespace onnxtrain
