// LeakyRelu and PRelu (slope broadcast to X), with gradients as PyTorch 1.13 computes them: the
// negative branch at x == 0 (dX = slope * dY there).
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/activation/leaky_relu_math.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

class LeakyReluKernel final : public Kernel {
 public:
  explicit LeakyReluKernel(const KernelInfo& info) : alpha_(info.node.attr_float("alpha", 0.01f)) {}
  void compute(KernelContext& ctx) const override {
    const float alpha = alpha_;
    float_unary_vectorized(ctx, "LeakyRelu", [alpha](auto x) {
      return leaky_relu_math::forward(x, static_cast<fast::lane_t<decltype(x)>>(alpha));
    });
  }

 private:
  float alpha_;
};

// Inputs dY, V: V is Y when alpha > 0 (then y > 0 exactly when x > 0, and Y is usually saved for
// the next layer anyway), else X.
class LeakyReluGradKernel final : public Kernel {
 public:
  explicit LeakyReluGradKernel(const KernelInfo& info) : alpha_(info.node.attr_float("alpha", 0.01f)) {}
  void compute(KernelContext& ctx) const override {
    const float alpha = alpha_;
    float_binary_vectorized(ctx, "LeakyReluGrad", [alpha](auto dy, auto v) {
      return leaky_relu_math::grad(dy, v, static_cast<fast::lane_t<decltype(dy)>>(alpha));
    });
  }

 private:
  float alpha_;
};

void leaky_relu_gradient(GradBuilder& g) {
  float alpha = g.node().attr_float("alpha", 0.01f);
  const std::string& saved = alpha > 0 ? g.output(0) : g.input(0);
  g.set_input_grad(0, g.op("LeakyReluGrad", {g.output_grad(0), saved}, {{"alpha", Attribute::of_float(alpha)}},
                           kOnnxTrainDomain));
}

void prelu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  OT_CHECK(x.dtype() == slope.dtype(), "PRelu: X is ", x.str(), ", slope is ", slope.str());
  // Unidirectional broadcasting: slope broadcasts to X, never the other way.
  OT_CHECK(broadcast_shapes({x.shape(), slope.shape()}, "PRelu") == x.shape(), "PRelu: slope ", slope.str(),
           " does not broadcast to X ", x.str());
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_numeric(x.dtype(), "PRelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_broadcast(ctx.threads(), x.data<T>(), x.shape(), slope.data<T>(), slope.shape(), y.data<T>(), x.shape(),
                     [](T v, T s) { return v < T(0) ? static_cast<T>(s * v) : v; });
  });
}

// PReluGrad(dY, X, slope), attribute input: 0 gives dX = dY or slope * dY, 1 gives the slope's
// gradient before summing to its shape, x * dY on the negative side.
class PReluGradKernel final : public Kernel {
 public:
  explicit PReluGradKernel(const KernelInfo& info) : input_(grad_input_attr(info, 2, "PReluGrad")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& slope = ctx.input(2);
    Tensor& out = ctx.allocate_output(0, dy.dtype(), dy.shape());
    dispatch_float(dy.dtype(), "PReluGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto run = [&](auto f) {
        ternary_broadcast(ctx.threads(), dy.data<T>(), dy.shape(), x.data<T>(), x.shape(), slope.data<T>(),
                          slope.shape(), out.data<T>(), dy.shape(), f);
      };
      if (input_ == 0) run([](T g, T v, T s) { return v > T(0) ? g : s * g; });
      else run([](T g, T v, T) { return v > T(0) ? T(0) : v * g; });
    });
  }

 private:
  int input_;
};

void prelu_gradient(GradBuilder& g) {
  for (int i = 0; i < 2; ++i) {
    if (!g.needs_input_grad(i)) continue;
    std::string d = g.op("PReluGrad", {g.output_grad(0), g.input(0), g.input(1)}, {{"input", Attribute::of_int(i)}},
                         kOnnxTrainDomain);
    g.set_input_grad(i, i == 0 ? d : g.reduce_to_input_shape(d, 1));
  }
}

// In a fused loop (FusedElementwise): alpha is the instruction's immediate.
struct LeakyReluForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float alpha, float) { return leaky_relu_math::forward(x, static_cast<T>(alpha)); }
  static fast::VF vector(fast::VF x, float alpha, float) { return leaky_relu_math::forward(x, alpha); }
};
const ElementwiseInstruction kLeakyRelu = fused::unary_instruction<LeakyReluForms>("LeakyRelu");

bool lower_leaky_relu(const Node& node, LoweredInstruction& out) {
  if (node.inputs.size() != 1) return false;
  out = {&kLeakyRelu, node.attr_float("alpha", 0.01f)};
  return true;
}

}  // namespace

ONNXTRAIN_KERNEL("", "LeakyRelu", kernel_factory<LeakyReluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "LeakyReluGrad", kernel_factory<LeakyReluGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "LeakyRelu", leaky_relu_gradient);
ONNXTRAIN_KERNEL("", "PRelu", kernel_factory(&prelu), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "PReluGrad", kernel_factory<PReluGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "PRelu", prelu_gradient);

ONNXTRAIN_INSTRUCTION(kLeakyRelu);
ONNXTRAIN_ELEMENTWISE("", "LeakyRelu", lower_leaky_relu);

}  // namespace onnxtrain
