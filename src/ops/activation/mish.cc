// ai.onnxtrain::Mish (PyTorch's Mish, x * tanh(softplus(x)), ONNX's Mish of opset 18) and
// MishGrad. The TorchScript exporter writes Mish as Mul(x, Tanh(Softplus(x))), whose training
// graph stashes x, softplus(x) and its tanh for every call, and opset 17 has no Mish for the
// dynamo exporter: both captures write this one op instead, whose gradient reads only X. The
// kernels and the fused loop's instruction compute with the formulas below.
#include <cmath>

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/activation/silu_math.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

// log(1 + e^x) without overflow for large x or lost digits for very negative x (as Softplus).
template <typename T>
T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

//   y = x t,  t = tanh(softplus(x)),  dy/dx = t + x sigmoid(x) (1 - t^2)   (PyTorch's mish_backward)
struct MishForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) {
    return x * std::tanh(softplus(x));
  }
  static fast::VF vector(fast::VF x, float, float) { return x * fast::tanh(fast::softplus(x)); }
};
struct MishGradForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T dy, T x, float, float) {
    const T t = std::tanh(softplus(x));
    return dy * (t + x * silu_math::sigmoid(x) * (T(1) - t * t));
  }
  static fast::VF vector(fast::VF dy, fast::VF x, float, float) {
    const fast::VF t = fast::tanh(fast::softplus(x));
    return dy * (t + x * fast::sigmoid(x) * (1.0f - t * t));
  }
};
const ElementwiseInstruction kMish = fused::unary_instruction<MishForms>("Mish");
const ElementwiseInstruction kMishGrad = fused::binary_instruction<MishGradForms>("MishGrad");

void mish(KernelContext& ctx) {
  float_unary_vectorized(ctx, "Mish", [](auto x) {
    if constexpr (std::is_same_v<decltype(x), fast::VF>) return MishForms::vector(x, 0, 0);
    else return MishForms::scalar(x, 0, 0);
  });
}

// Inputs: dY, X.
void mish_grad(KernelContext& ctx) {
  float_binary_vectorized(ctx, "MishGrad", [](auto dy, auto x) {
    if constexpr (std::is_same_v<decltype(dy), fast::VF>) return MishGradForms::vector(dy, x, 0, 0);
    else return MishGradForms::scalar(dy, x, 0, 0);
  });
}

void mish_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("MishGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_SCHEMA(elementwise_float_schema("Mish", "torch.nn.functional.mish: x * tanh(softplus(x))."));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Mish", kernel_factory(&mish), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MishGrad", kernel_factory(&mish_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Mish", mish_gradient);
ONNXTRAIN_INSTRUCTION(kMish);
ONNXTRAIN_INSTRUCTION(kMishGrad);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "Mish", (fused::lower_to<kMish, 1>));
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "MishGrad", (fused::lower_to<kMishGrad, 2>));

}  // namespace onnxtrain
