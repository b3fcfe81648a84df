// ai.onnxtrain::Gelu (PyTorch's GELU, exact or tanh-approximated) and GeluGrad. torch 1.13
// exports GELU as five elementwise ops (opset 20 brings ONNX's own Gelu), whose training graph
// stashes four intermediates per call; the front end exports it as this one op instead, whose
// gradient reads only X. The formulas are in gelu_math.h.
#include "ops/activation/gelu_math.h"

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"
#include "ops/registry.h"

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

}  // namespace

ONNXTRAIN_SCHEMA(gelu_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Gelu", kernel_factory<GeluKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GeluGrad", kernel_factory<GeluGradKernel>());
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Gelu", gelu_gradient);

}  // namespace onnxtrain
