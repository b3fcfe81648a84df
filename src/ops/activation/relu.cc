// Relu, and ReluGrad (dX = dY except where Y <= 0) which its gradient uses. Both are written as
// PyTorch's threshold ops are, so that NaN passes through: relu(NaN) = NaN and its gradient is dY.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/fused/instruction_forms.h"

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

struct ReluForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T x, float, float) { return x <= T(0) ? T(0) : x; }
};
struct ReluGradForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T dy, T y, float, float) { return y <= T(0) ? T(0) : dy; }
};
const ElementwiseInstruction kRelu = fused::unary_instruction<ReluForms>("Relu");
const ElementwiseInstruction kReluGrad = fused::binary_instruction<ReluGradForms>("ReluGrad");

}  // namespace

ONNXTRAIN_KERNEL("", "Relu", kernel_factory(&relu), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReluGrad", kernel_factory(&relu_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Relu", relu_gradient);

ONNXTRAIN_INSTRUCTION(kRelu);
ONNXTRAIN_INSTRUCTION(kReluGrad);
ONNXTRAIN_ELEMENTWISE("", "Relu", (fused::lower_to<kRelu, 1>));
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "ReluGrad", (fused::lower_to<kReluGrad, 2>));

}  // namespace onnxtrain
