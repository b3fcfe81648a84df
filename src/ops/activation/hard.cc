// Piecewise-linear activations: HardSigmoid and HardSwish (with gradients), ThresholdedRelu and
// Shrink (forward only).
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

// y = max(0, min(1, alpha * x + beta)).
class HardSigmoidKernel final : public Kernel {
 public:
  explicit HardSigmoidKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 0.2f)), beta_(info.node.attr_float("beta", 0.5f)) {}
  void compute(KernelContext& ctx) const override {
    const double alpha = alpha_, beta = beta_;
    float_unary(ctx, "HardSigmoid", [alpha, beta](auto x) {
      using T = decltype(x);
      T t = static_cast<T>(alpha) * x + static_cast<T>(beta);
      t = t < T(0) ? T(0) : t;
      return t > T(1) ? T(1) : t;
    });
  }

 private:
  float alpha_, beta_;
};

// HardSigmoidGrad(dY, Y), attribute alpha: dY * alpha where 0 < y < 1, as PyTorch's hardsigmoid
// backward (open interval: no gradient at the corners).
class HardSigmoidGradKernel final : public Kernel {
 public:
  explicit HardSigmoidGradKernel(const KernelInfo& info) : alpha_(info.node.attr_float("alpha", 0.2f)) {}
  void compute(KernelContext& ctx) const override {
    const float alpha = alpha_;
    float_binary_vectorized(ctx, "HardSigmoidGrad", [alpha](auto dy, auto y) {
      using V = decltype(dy);
      using T = fast::lane_t<V>;
      return ((y > T(0)) & (y < T(1))) ? dy * static_cast<T>(alpha) : V{};
    });
  }

 private:
  float alpha_;
};

void hard_sigmoid_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("HardSigmoidGrad", {g.output_grad(0), g.output(0)},
                           {{"alpha", Attribute::of_float(g.node().attr_float("alpha", 0.2f))}}, kOnnxTrainDomain));
}

// y = x * HardSigmoid(x) with alpha = 1/6, beta = 1/2.
void hard_swish(KernelContext& ctx) {
  float_unary(ctx, "HardSwish", [](auto x) {
    using T = decltype(x);
    T t = x * static_cast<T>(1.0 / 6.0) + T(0.5);
    t = t < T(0) ? T(0) : t;
    return x * (t > T(1) ? T(1) : t);
  });
}

// HardSwishGrad(dY, X) as PyTorch's hardswish_backward: 0 below -3, x/3 + 1/2 on [-3, 3]
// (both ends included), 1 above; NaN takes the middle branch and stays NaN, as in PyTorch's
// vectorized kernel.
void hard_swish_grad(KernelContext& ctx) {
  float_binary(ctx, "HardSwishGrad", [](auto dy, auto x) {
    using T = decltype(dy);
    if (x < T(-3)) return T(0);
    return x > T(3) ? dy : dy * (x / T(3) + T(0.5));
  });
}

void hard_swish_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("HardSwishGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

class ThresholdedReluKernel final : public Kernel {
 public:
  explicit ThresholdedReluKernel(const KernelInfo& info) : alpha_(info.node.attr_float("alpha", 1.0f)) {}
  void compute(KernelContext& ctx) const override {
    const double alpha = alpha_;
    float_unary(ctx, "ThresholdedRelu", [alpha](auto x) {
      using T = decltype(x);
      return x > static_cast<T>(alpha) ? x : T(0);
    });
  }

 private:
  float alpha_;
};

// y = x + bias below -lambd, x - bias above lambd, 0 between. Any numeric type: the attributes
// are floats, so integers compute in double and convert back.
class ShrinkKernel final : public Kernel {
 public:
  explicit ShrinkKernel(const KernelInfo& info)
      : bias_(info.node.attr_float("bias", 0.0f)), lambd_(info.node.attr_float("lambd", 0.5f)) {}
  void compute(KernelContext& ctx) const override {
    const double bias = bias_, lambd = lambd_;
    dispatch_numeric(ctx.input(0).dtype(), "Shrink", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = std::conditional_t<std::is_same_v<T, float>, float, double>;
      unary_kernel<T>(ctx, [bias, lambd](T v) {
        const C x = static_cast<C>(v), b = static_cast<C>(bias), l = static_cast<C>(lambd);
        return static_cast<T>(x < -l ? x + b : x > l ? x - b : C(0));
      });
    });
  }

 private:
  float bias_, lambd_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "HardSigmoid", kernel_factory<HardSigmoidKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "HardSigmoidGrad", kernel_factory<HardSigmoidGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "HardSigmoid", hard_sigmoid_gradient);
ONNXTRAIN_KERNEL("", "HardSwish", kernel_factory(&hard_swish), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "HardSwishGrad", kernel_factory(&hard_swish_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "HardSwish", hard_swish_gradient);
ONNXTRAIN_KERNEL("", "ThresholdedRelu", kernel_factory<ThresholdedReluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Shrink", kernel_factory<ShrinkKernel>(), Recompute::Cheap, Rounding::PerValue);

}  // namespace onnxtrain
