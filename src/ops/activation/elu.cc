// The exponential linear family, y = scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1)):
//   Elu  (alpha)                scale = 1,     input_scale = 1
//   Selu (alpha, gamma)         scale = gamma, input_scale = 1
//   Celu (alpha)                scale = 1,     input_scale = 1 / alpha
// One backward kernel serves all three, EluGrad(dY, V) with attributes op, is_result and the
// forward's alpha/gamma, as PyTorch's elu_backward does: V is Y when the sign of y tells the
// branch (alpha, scale > 0), then dX = dY * (y > 0 ? scale : input_scale * (y + alpha * scale));
// else V is X. x == 0 takes the negative branch, as in PyTorch.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

struct EluParams {
  double alpha, scale, input_scale;
};

// `op` is the forward op: EluGrad carries it in attribute 'op' beside the forward's attributes,
// so parameters are derived in double precision once, the same way in both directions.
EluParams params_of(const Node& n, const std::string& op) {
  if (op == "Selu")
    return {n.attr_float("alpha", 1.67326319217681884765625f), n.attr_float("gamma", 1.05070102214813232421875f), 1.0};
  if (op == "Celu") {
    double alpha = n.attr_float("alpha", 1.0f);
    OT_CHECK(alpha != 0, "Celu: attribute 'alpha' must not be 0");
    return {alpha, 1.0, 1.0 / alpha};
  }
  return {n.attr_float("alpha", 1.0f), 1.0, 1.0};
}

class EluKernel final : public Kernel {
 public:
  explicit EluKernel(const KernelInfo& info) : p_(params_of(info.node, info.node.op_type)) {}
  void compute(KernelContext& ctx) const override {
    const EluParams p = p_;
    // Celu is max(0,x) + min(0, alpha * expm1(x / alpha)): the same as long as alpha > 0.
    float_unary_vectorized(ctx, "Elu", [p](auto x) {
      using T = fast::lane_t<decltype(x)>;
      using fast::expm1;
      using std::expm1;
      const T scale = static_cast<T>(p.scale);
      return x > T(0) ? scale * x : scale * static_cast<T>(p.alpha) * expm1(x * static_cast<T>(p.input_scale));
    });
  }

 private:
  EluParams p_;
};

class EluGradKernel final : public Kernel {
 public:
  explicit EluGradKernel(const KernelInfo& info)
      : p_(params_of(info.node, info.node.attr_string("op", "Elu"))),
        is_result_(info.node.attr_int("is_result", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const EluParams p = p_;
    if (is_result_) {
      float_binary_vectorized(ctx, "EluGrad", [p](auto dy, auto y) {
        using T = fast::lane_t<decltype(dy)>;
        return y > T(0) ? dy * static_cast<T>(p.scale)
                        : dy * static_cast<T>(p.input_scale) * (y + static_cast<T>(p.alpha * p.scale));
      });
    } else {
      float_binary_vectorized(ctx, "EluGrad", [p](auto dy, auto x) {
        using T = fast::lane_t<decltype(dy)>;
        using fast::exp;
        using std::exp;
        return x > T(0) ? dy * static_cast<T>(p.scale)
                        : dy * static_cast<T>(p.input_scale * p.alpha * p.scale) * exp(x * static_cast<T>(p.input_scale));
      });
    }
  }

 private:
  EluParams p_;
  bool is_result_;
};

void elu_gradient(GradBuilder& g) {
  EluParams p = params_of(g.node(), g.node().op_type);
  const bool from_output = p.alpha > 0 && p.scale > 0;
  AttributeMap attrs = g.node().attrs;
  attrs["op"] = Attribute::of_string(g.node().op_type);
  attrs["is_result"] = Attribute::of_int(from_output ? 1 : 0);
  g.set_input_grad(0, g.op("EluGrad", {g.output_grad(0), from_output ? g.output(0) : g.input(0)}, attrs,
                           kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Elu", kernel_factory<EluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Selu", kernel_factory<EluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Celu", kernel_factory<EluKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "EluGrad", kernel_factory<EluGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Elu", elu_gradient);
ONNXTRAIN_GRADIENT("", "Selu", elu_gradient);
ONNXTRAIN_GRADIENT("", "Celu", elu_gradient);

}  // namespace onnxtrain
