// Sigmoid and Tanh, whose gradients are functions of the output alone. float32 runs the
// vectorized forms of ops/math/fast_math.h (SiLU and tanh-GELU reach us as these).
#include <cmath>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/activation/silu_math.h"
#include "ops/common/elementwise.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/fast_math.h"

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

// In a fused loop (FusedElementwise): the kernels' own formulas, vectorized where theirs are.
struct SigmoidForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return silu_math::sigmoid(x); }
  static fast::VF vector(fast::VF x, float, float) { return fast::sigmoid(x); }
};
struct TanhForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return std::tanh(x); }
  static fast::VF vector(fast::VF x, float, float) { return fast::tanh(x); }
};
struct SigmoidGradForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T dy, T y, float, float) { return dy * y * (T(1) - y); }
};
struct TanhGradForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T dy, T y, float, float) { return dy * (T(1) - y * y); }
};
const ElementwiseInstruction kSigmoid = fused::unary_instruction<SigmoidForms>("Sigmoid");
const ElementwiseInstruction kTanh = fused::unary_instruction<TanhForms>("Tanh");
const ElementwiseInstruction kSigmoidGrad = fused::binary_instruction<SigmoidGradForms>("SigmoidGrad");
const ElementwiseInstruction kTanhGrad = fused::binary_instruction<TanhGradForms>("TanhGrad");

}  // namespace

ONNXTRAIN_KERNEL("", "Sigmoid", kernel_factory(&sigmoid), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Tanh", kernel_factory(&tanh_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SigmoidGrad", kernel_factory(&sigmoid_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "TanhGrad", kernel_factory(&tanh_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Sigmoid", sigmoid_gradient);
ONNXTRAIN_GRADIENT("", "Tanh", tanh_gradient);

ONNXTRAIN_INSTRUCTION(kSigmoid);
ONNXTRAIN_INSTRUCTION(kTanh);
ONNXTRAIN_INSTRUCTION(kSigmoidGrad);
ONNXTRAIN_INSTRUCTION(kTanhGrad);
ONNXTRAIN_ELEMENTWISE("", "Sigmoid", (fused::lower_to<kSigmoid, 1>));
ONNXTRAIN_ELEMENTWISE("", "Tanh", (fused::lower_to<kTanh, 1>));
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "SigmoidGrad", (fused::lower_to<kSigmoidGrad, 2>));
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "TanhGrad", (fused::lower_to<kTanhGrad, 2>));

}  // namespace onnxtrain
