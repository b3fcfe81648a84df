// Trigonometric and hyperbolic functions and their inverses, each with a fused backward kernel
// <Op>Grad(dY, X) (TanGrad takes Y: 1 + tan^2 is cheaper than 1 / cos^2 and saves X no more).
// Derivatives are written as PyTorch 1.13 writes them, so the edges of the domains (asin at
// +-1, acosh at 1, atanh at +-1) give the same infinities.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

struct Sin {
  template <typename T> static T f(T x) { return std::sin(x); }
  template <typename T> static T df(T dy, T x) { return dy * std::cos(x); }
};
struct Cos {
  template <typename T> static T f(T x) { return std::cos(x); }
  template <typename T> static T df(T dy, T x) { return -dy * std::sin(x); }
};
struct Tan {
  static constexpr bool kUsesOutput = true;
  template <typename T> static T f(T x) { return std::tan(x); }
  template <typename T> static T df(T dy, T y) { return dy * (T(1) + y * y); }
};
struct Asin {
  template <typename T> static T f(T x) { return std::asin(x); }
  template <typename T> static T df(T dy, T x) { return dy / std::sqrt(T(1) - x * x); }
};
struct Acos {
  template <typename T> static T f(T x) { return std::acos(x); }
  template <typename T> static T df(T dy, T x) { return -dy / std::sqrt(T(1) - x * x); }
};
struct Atan {
  template <typename T> static T f(T x) { return std::atan(x); }
  template <typename T> static T df(T dy, T x) { return dy / (x * x + T(1)); }
};
struct Sinh {
  template <typename T> static T f(T x) { return std::sinh(x); }
  template <typename T> static T df(T dy, T x) { return dy * std::cosh(x); }
};
struct Cosh {
  template <typename T> static T f(T x) { return std::cosh(x); }
  template <typename T> static T df(T dy, T x) { return dy * std::sinh(x); }
};
struct Asinh {
  template <typename T> static T f(T x) { return std::asinh(x); }
  template <typename T> static T df(T dy, T x) { return dy / std::sqrt(x * x + T(1)); }
};
struct Acosh {
  template <typename T> static T f(T x) { return std::acosh(x); }
  template <typename T> static T df(T dy, T x) { return dy / std::sqrt(x * x - T(1)); }
};
struct Atanh {
  template <typename T> static T f(T x) { return std::atanh(x); }
  template <typename T> static T df(T dy, T x) { return dy / (T(1) - x * x); }
};

template <typename Op, typename = void>
struct UsesOutput : std::false_type {};
template <typename Op>
struct UsesOutput<Op, std::void_t<decltype(Op::kUsesOutput)>> : std::bool_constant<Op::kUsesOutput> {};

template <typename Op>
void forward(KernelContext& ctx) {
  float_unary(ctx, "trigonometric op", [](auto x) { return Op::f(x); });
}

template <typename Op>
void backward(KernelContext& ctx) {
  float_binary(ctx, "trigonometric gradient", [](auto dy, auto v) { return Op::df(dy, v); });
}

template <typename Op>
void gradient(GradBuilder& g) {
  const std::string& saved = UsesOutput<Op>::value ? g.output(0) : g.input(0);
  g.set_input_grad(0, g.op(g.node().op_type + "Grad", {g.output_grad(0), saved}, {}, kOnnxTrainDomain));
}

}  // namespace

#define OT_TRIG_OP(Op)                                                                             \
  ONNXTRAIN_KERNEL("", #Op, kernel_factory(&forward<Op>), Recompute::Costly, Rounding::PerValue); \
  ONNXTRAIN_KERNEL(kOnnxTrainDomain, #Op "Grad", kernel_factory(&backward<Op>), Recompute::Costly,   \
                   Rounding::PerValue);                                                          \
  ONNXTRAIN_GRADIENT("", #Op, gradient<Op>)

OT_TRIG_OP(Sin);
OT_TRIG_OP(Cos);
OT_TRIG_OP(Tan);
OT_TRIG_OP(Asin);
OT_TRIG_OP(Acos);
OT_TRIG_OP(Atan);
OT_TRIG_OP(Sinh);
OT_TRIG_OP(Cosh);
OT_TRIG_OP(Asinh);
OT_TRIG_OP(Acosh);
OT_TRIG_OP(Atanh);

#undef OT_TRIG_OP

}  // namespace onnxtrain
