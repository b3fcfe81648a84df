// Relu, and ReluGrad (dX = dY except where Y <= 0) which its gradient uses. Both are written as
// PyTorch's threshold ops are, so that NaN passes through: relu(NaN) = NaN and its gradient is dY.
#include "autodiff/grad_builder.h"
#include "ops/common/elementwise.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

void relu(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "Relu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return x <= T(0) ? T(0) : x; });
  });
}

// Inputs: dY, Y.
void relu_grad(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "ReluGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T dy, T y) { return y <= T(0) ? T(0) : dy; });
  });
}

void relu_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("ReluGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Relu", kernel_factory(&relu));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReluGrad", kernel_factory(&relu_grad));
ONNXTRAIN_GRADIENT("", "Relu", relu_gradient);

}  // namespace onnxtrain
