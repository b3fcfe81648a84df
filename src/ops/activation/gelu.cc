// ai.onnxtrain::Gelu (PyTorch's GELU, exact or tanh-approximated) and GeluGrad. torch 1.13
// exports GELU as five elementwise ops (opset 20 brings ONNX's own Gelu), whose training graph
// stashes four intermediates per call; the front end exports it as this one op instead, whose
// gradient reads only X.
//   exact:  y = x Phi(x),          dy/dx = Phi(x) + x phi(x)
//   tanh:   y = x (1 + t) / 2,     t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)
//           dy/dx = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2
#include <cmath>

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;

bool tanh_form(const KernelInfo& info) {
  const std::string a = info.node.attr_string("approximate", "none");
  OT_CHECK(a == "none" || a == "tanh", "attribute 'approximate' must be 'none' or 'tanh', got '", a, "'");
  return a == "tanh";
}

namespace vec = fast;

vec::VF gelu_exact(vec::VF x) { return x * (0.5f + 0.5f * vec::erf(x * static_cast<float>(kInvSqrt2))); }
vec::VF gelu_tanh(vec::VF x) {
  const vec::VF t = vec::tanh(static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x * x * x));
  return 0.5f * x * (1.0f + t);
}
vec::VF gelu_exact_grad(vec::VF dy, vec::VF x) {
  const vec::VF cdf = 0.5f + 0.5f * vec::erf(x * static_cast<float>(kInvSqrt2));
  const vec::VF pdf = static_cast<float>(kInvSqrt2Pi) * vec::exp(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
vec::VF gelu_tanh_grad(vec::VF dy, vec::VF x) {
  const vec::VF x2 = x * x;
  const vec::VF t = vec::tanh(static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x2 * x));
  const vec::VF du = static_cast<float>(kSqrt2OverPi) * (1.0f + static_cast<float>(3 * kCubic) * x2);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelInfo& info) : tanh_(tanh_form(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::Float32) {
      Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
      if (tanh_) fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), gelu_tanh);
      else fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), gelu_exact);
      return;
    }
    const bool t = tanh_;
    float_unary(ctx, "Gelu", [t](auto v) {
      using T = decltype(v);
      if (t) return T(0.5) * v * (T(1) + std::tanh(static_cast<T>(kSqrt2OverPi) * (v + static_cast<T>(kCubic) * v * v * v)));
      return v * T(0.5) * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
    });
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
      if (tanh_) fast::zip(ctx.threads(), dy.data<float>(), x.data<float>(), dx.data<float>(), x.numel(), gelu_tanh_grad);
      else fast::zip(ctx.threads(), dy.data<float>(), x.data<float>(), dx.data<float>(), x.numel(), gelu_exact_grad);
      return;
    }
    const bool t = tanh_;
    float_binary(ctx, "GeluGrad", [t](auto g, auto v) {
      using T = decltype(g);
      if (t) {
        const T x2 = v * v;
        const T th = std::tanh(static_cast<T>(kSqrt2OverPi) * (v + static_cast<T>(kCubic) * x2 * v));
        const T du = static_cast<T>(kSqrt2OverPi) * (T(1) + static_cast<T>(3 * kCubic) * x2);
        return g * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
      }
      const T cdf = T(0.5) * (T(1) + std::erf(v * static_cast<T>(kInvSqrt2)));
      return g * (cdf + v * static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v));
    });
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
  onnx::OpSchema schema;
  schema.SetName("Gelu")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("torch.nn.functional.gelu: x * Phi(x), or its tanh approximation.")
      .Attr("approximate", "'none' or 'tanh'", onnx::AttributeProto::STRING, std::string("none"))
      .Input(0, "X", "input", "T")
      .Output(0, "Y", "output", "T")
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "float types")
      .TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(gelu_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Gelu", kernel_factory<GeluKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GeluGrad", kernel_factory<GeluGradKernel>());
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "Gelu", gelu_gradient);

}  // namespace onnxtrain
