// ai.onnxtrain::Silu (PyTorch's SiLU, x * sigmoid(x)) and SiluGrad. Both captures export SiLU as
// Mul(x, Sigmoid(x)), whose training graph stashes x and sigmoid(x) for every call (timm's
// EfficientNet-B0 peaked 188 MB higher so, at 1474 MB; Llama's SwiGLU pays it per layer). The
// front end exports it as this one op instead, whose gradient reads only X and recomputes the
// sigmoid. The formulas are in silu_math.h.
#include "ops/activation/silu_math.h"

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

class SiluKernel final : public Kernel {
 public:
  explicit SiluKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::Float32) {
      Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
      fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), [](fast::VF v) { return silu_math::forward(v); });
      return;
    }
    float_unary(ctx, "Silu", [](auto v) { return silu_math::forward(v); });
  }
};

// Inputs: dY, X.
class SiluGradKernel final : public Kernel {
 public:
  explicit SiluGradKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (dy.dtype() == DType::Float32 && x.dtype() == DType::Float32 && dy.shape() == x.shape()) {
      Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
      fast::zip(ctx.threads(), dy.data<float>(), x.data<float>(), dx.data<float>(), x.numel(),
                [](fast::VF g, fast::VF v) { return silu_math::grad(g, v); });
      return;
    }
    float_binary(ctx, "SiluGrad", [](auto g, auto v) { return silu_math::grad(g, v); });
  }
};

void silu_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("SiluGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

// In a fused loop (FusedElementwise): the kernels' own forms.
struct SiluForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return silu_math::forward(x); }
  static fast::VF vector(fast::VF x, float, float) { return silu_math::forward(x); }
};
struct SiluGradForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T dy, T x, float, float) { return silu_math::grad(dy, x); }
  static fast::VF vector(fast::VF dy, fast::VF x, float, float) { return silu_math::grad(dy, x); }
};
const ElementwiseInstruction kSilu = fused::unary_instruction<SiluForms>("Silu");
const ElementwiseInstruction kSiluGrad = fused::binary_instruction<SiluGradForms>("SiluGrad");

}  // namespace

ONNXTRAIN_SCHEMA(elementwise_float_schema("Silu", "torch.nn.functional.silu: x * sigmoid(x)."));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Silu", kernel_factory<SiluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SiluGrad", kernel_factory<SiluGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Silu", silu_gradient);

ONNXTRAIN_INSTRUCTION(kSilu);
ONNXTRAIN_INSTRUCTION(kSiluGrad);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "Silu", (fused::lower_to<kSilu, 1>));
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "SiluGrad", (fused::lower_to<kSiluGrad, 2>));

}  // namespace onnxtrain
