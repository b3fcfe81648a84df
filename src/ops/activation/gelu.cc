// ai.onnxtrain::Gelu (PyTorch's GELU, exact or tanh-approximated) and GeluGrad. torch 1.13
// exports GELU as five elementwise ops (opset 20 brings ONNX's own Gelu), whose training graph
// stashes four intermediates per call; the front end exports it as this one op instead, whose
// gradient reads only X. The formulas are in gelu_math.h.
#include "ops/activation/gelu_math.h"

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

bool tanh_form(const KernelInfo& info) {
  const std::string a = info.node.attr_string("approximate", "none");
  OT_CHECK(a == "none" || a == "tanh", "attribute 'approximate' must be 'none' or 'tanh', got '", a, "'");
  return a == "tanh";
}

class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelInfo& info) : tanh_(tanh_form(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::Float32) {
      Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
      if (tanh_) fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), [](fast::VF v) { return gelu_math::tanh_form(v); });
      else fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), [](fast::VF v) { return gelu_math::exact(v); });
      return;
    }
    const bool t = tanh_;
    float_unary(ctx, "Gelu", [t](auto v) { return t ? gelu_math::tanh_form(v) : gelu_math::exact(v); });
  }

 private:
  bool tanh_;
};

// Inputs: dY, X.
class GeluGradKernel final : public Kernel {
 public:
  explicit GeluGradKernel(const KernelInfo& info) : tanh_(tanh_form(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (dy.dtype() == DType::Float32 && x.dtype() == DType::Float32 && dy.shape() == x.shape()) {
      Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
      auto f = tanh_ ? +[](fast::VF g, fast::VF v) { return gelu_math::tanh_grad(g, v); }
                     : +[](fast::VF g, fast::VF v) { return gelu_math::exact_grad(g, v); };
      fast::zip(ctx.threads(), dy.data<float>(), x.data<float>(), dx.data<float>(), x.numel(), f);
      return;
    }
    const bool t = tanh_;
    float_binary(ctx, "GeluGrad", [t](auto g, auto v) { return t ? gelu_math::tanh_grad(g, v) : gelu_math::exact_grad(g, v); });
  }

 private:
  bool tanh_;
};

void gelu_gradient(GradBuilder& g) {
  AttributeMap attrs;
  if (g.node().has_attr("approximate")) attrs["approximate"] = g.node().attrs.at("approximate");
  g.set_input_grad(0, g.op("GeluGrad", {g.output_grad(0), g.input(0)}, attrs, kOnnxTrainDomain));
}

onnx::OpSchema gelu_schema() {
  onnx::OpSchema schema =
      elementwise_float_schema("Gelu", "torch.nn.functional.gelu: x * Phi(x), or its tanh approximation.");
  schema.Attr("approximate", "'none' or 'tanh'", onnx::AttributeProto::STRING, std::string("none"));
  return schema;
}

// In a fused loop (FusedElementwise): one instruction per form, as the kernels pick them.
struct GeluExactForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return gelu_math::exact(x); }
  static fast::VF vector(fast::VF x, float, float) { return gelu_math::exact(x); }
};
struct GeluTanhForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return gelu_math::tanh_form(x); }
  static fast::VF vector(fast::VF x, float, float) { return gelu_math::tanh_form(x); }
};
struct GeluExactGradForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T dy, T x, float, float) { return gelu_math::exact_grad(dy, x); }
  static fast::VF vector(fast::VF dy, fast::VF x, float, float) { return gelu_math::exact_grad(dy, x); }
};
struct GeluTanhGradForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T dy, T x, float, float) { return gelu_math::tanh_grad(dy, x); }
  static fast::VF vector(fast::VF dy, fast::VF x, float, float) { return gelu_math::tanh_grad(dy, x); }
};
const ElementwiseInstruction kGeluExact = fused::unary_instruction<GeluExactForms>("GeluExact");
const ElementwiseInstruction kGeluTanh = fused::unary_instruction<GeluTanhForms>("GeluTanh");
const ElementwiseInstruction kGeluExactGrad = fused::binary_instruction<GeluExactGradForms>("GeluExactGrad");
const ElementwiseInstruction kGeluTanhGrad = fused::binary_instruction<GeluTanhGradForms>("GeluTanhGrad");

// Gelu (one input) or GeluGrad (two); an unknown form is left to the kernel, whose error names it.
template <size_t Inputs>
bool lower_gelu(const Node& node, LoweredInstruction& out) {
  const std::string approximate = node.attr_string("approximate", "none");
  if (node.inputs.size() != Inputs || (approximate != "none" && approximate != "tanh")) return false;
  const bool tanh = approximate == "tanh";
  if constexpr (Inputs == 1) out = {tanh ? &kGeluTanh : &kGeluExact};
  else out = {tanh ? &kGeluTanhGrad : &kGeluExactGrad};
  return true;
}

}  // namespace

ONNXTRAIN_SCHEMA(gelu_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Gelu", kernel_factory<GeluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GeluGrad", kernel_factory<GeluGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Gelu", gelu_gradient);

ONNXTRAIN_INSTRUCTION(kGeluExact);
ONNXTRAIN_INSTRUCTION(kGeluTanh);
ONNXTRAIN_INSTRUCTION(kGeluExactGrad);
ONNXTRAIN_INSTRUCTION(kGeluTanhGrad);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "Gelu", lower_gelu<1>);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "GeluGrad", lower_gelu<2>);

}  // namespace onnxtrain
