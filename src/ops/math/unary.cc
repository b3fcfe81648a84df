// Unary math: Abs, Exp, Log, Sqrt, Reciprocal, Erf with gradients, and Sign and the roundings
// Floor, Ceil, Round, whose derivative is zero wherever it exists: PyTorch gives them a zero
// gradient (outputs that still require grad), so they get one here too.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/fast_math.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

template <typename T>
T abs_value(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else if constexpr (std::is_floating_point_v<T>) return std::abs(x);
  else return static_cast<T>(x < 0 ? -x : x);
}

void abs_kernel(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "Abs", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return abs_value(x); });
  });
}

// PyTorch's sign, (0 < x) - (x < 0): NaN and both zeros give 0.
void sign_kernel(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "Sign", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return x > T(0) ? T(1) : x < T(0) ? static_cast<T>(-1) : T(0); });
  });
}

void exp_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::Float32) {
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    fast_exp(ctx.threads(), x.data<float>(), y.data<float>(), x.numel());
    return;
  }
  float_unary(ctx, "Exp", [](auto v) { return std::exp(v); });
}

void erf_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::Float32) {
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    fast_erf(ctx.threads(), x.data<float>(), y.data<float>(), x.numel());
    return;
  }
  float_unary(ctx, "Erf", [](auto v) { return std::erf(v); });
}

void log_kernel(KernelContext& ctx) {
  float_unary_vectorized(ctx, "Log", [](auto x) {
    using fast::log;
    using std::log;
    return log(x);
  });
}
void sqrt_kernel(KernelContext& ctx) { float_unary(ctx, "Sqrt", [](auto x) { return std::sqrt(x); }); }
void floor_kernel(KernelContext& ctx) { float_unary(ctx, "Floor", [](auto x) { return std::floor(x); }); }
void ceil_kernel(KernelContext& ctx) { float_unary(ctx, "Ceil", [](auto x) { return std::ceil(x); }); }
// Halves to even: nearbyint under the default rounding mode, which runs never change.
void round_kernel(KernelContext& ctx) { float_unary(ctx, "Round", [](auto x) { return std::nearbyint(x); }); }
void reciprocal_kernel(KernelContext& ctx) {
  float_unary(ctx, "Reciprocal", [](auto x) { return decltype(x)(1) / x; });
}

// Backward kernels, inputs (dY, X) or (dY, Y) as named.
// d|x| = sign(x), 0 at 0 as in PyTorch.
void abs_grad(KernelContext& ctx) {
  float_binary(ctx, "AbsGrad", [](auto dy, auto x) {
    using T = decltype(dy);
    return x > T(0) ? dy : x < T(0) ? -dy : T(0);
  });
}
void sqrt_grad(KernelContext& ctx) {  // (dY, Y)
  float_binary(ctx, "SqrtGrad", [](auto dy, auto y) { return dy / (y + y); });
}
void reciprocal_grad(KernelContext& ctx) {  // (dY, Y)
  float_binary(ctx, "ReciprocalGrad", [](auto dy, auto y) { return -dy * (y * y); });
}
void erf_grad(KernelContext& ctx) {  // (dY, X)
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (dy.dtype() == DType::Float32 && x.dtype() == DType::Float32 && dy.shape() == x.shape()) {
    Tensor& out = ctx.allocate_output(0, dy.dtype(), dy.shape());
    fast::zip(ctx.threads(), dy.data<float>(), x.data<float>(), out.data<float>(), dy.numel(),
              [](fast::VF g, fast::VF v) { return g * 1.12837916709551257f * fast::exp(-(v * v)); });
    return;
  }
  float_binary(ctx, "ErfGrad", [](auto dy, auto x) {
    using T = decltype(dy);
    constexpr T k2OverSqrtPi = T(1.1283791670955126);
    return dy * k2OverSqrtPi * std::exp(-x * x);
  });
}

void abs_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("AbsGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}
void exp_gradient(GradBuilder& g) { g.set_input_grad(0, g.op("Mul", {g.output_grad(0), g.output(0)})); }
void log_gradient(GradBuilder& g) { g.set_input_grad(0, g.op("Div", {g.output_grad(0), g.input(0)})); }
void sqrt_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("SqrtGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}
void reciprocal_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("ReciprocalGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}
void erf_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("ErfGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

// In a fused loop (FusedElementwise): the kernels' own formulas, vectorized where theirs are.
struct AbsForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T x, float, float) { return abs_value(x); }
};
struct SqrtForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T x, float, float) { return std::sqrt(x); }
};
struct ReciprocalForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T x, float, float) { return T(1) / x; }
};
struct ExpForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return std::exp(x); }
  static fast::VF vector(fast::VF x, float, float) { return fast::exp(x); }
};
struct LogForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return std::log(x); }
  static fast::VF vector(fast::VF x, float, float) { return fast::log(x); }
};
struct ErfForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float, float) { return std::erf(x); }
  static fast::VF vector(fast::VF x, float, float) { return fast::erf(x); }
};
const ElementwiseInstruction kAbs = fused::unary_instruction<AbsForms>("Abs");
const ElementwiseInstruction kSqrt = fused::unary_instruction<SqrtForms>("Sqrt");
const ElementwiseInstruction kReciprocal = fused::unary_instruction<ReciprocalForms>("Reciprocal");
const ElementwiseInstruction kExp = fused::unary_instruction<ExpForms>("Exp");
const ElementwiseInstruction kLog = fused::unary_instruction<LogForms>("Log");
const ElementwiseInstruction kErf = fused::unary_instruction<ErfForms>("Erf");

}  // namespace

ONNXTRAIN_KERNEL("", "Abs", kernel_factory(&abs_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Sign", kernel_factory(&sign_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Exp", kernel_factory(&exp_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Log", kernel_factory(&log_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Sqrt", kernel_factory(&sqrt_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Reciprocal", kernel_factory(&reciprocal_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Erf", kernel_factory(&erf_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Floor", kernel_factory(&floor_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Ceil", kernel_factory(&ceil_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Round", kernel_factory(&round_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "AbsGrad", kernel_factory(&abs_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SqrtGrad", kernel_factory(&sqrt_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReciprocalGrad", kernel_factory(&reciprocal_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ErfGrad", kernel_factory(&erf_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Abs", abs_gradient);
ONNXTRAIN_GRADIENT("", "Exp", exp_gradient);
ONNXTRAIN_GRADIENT("", "Log", log_gradient);
ONNXTRAIN_GRADIENT("", "Sqrt", sqrt_gradient);
ONNXTRAIN_GRADIENT("", "Reciprocal", reciprocal_gradient);
ONNXTRAIN_GRADIENT("", "Erf", erf_gradient);
ONNXTRAIN_ZERO_GRADIENT("", "Sign");
ONNXTRAIN_ZERO_GRADIENT("", "Floor");
ONNXTRAIN_ZERO_GRADIENT("", "Ceil");
ONNXTRAIN_ZERO_GRADIENT("", "Round");

ONNXTRAIN_INSTRUCTION(kAbs);
ONNXTRAIN_INSTRUCTION(kSqrt);
ONNXTRAIN_INSTRUCTION(kReciprocal);
ONNXTRAIN_INSTRUCTION(kExp);
ONNXTRAIN_INSTRUCTION(kLog);
ONNXTRAIN_INSTRUCTION(kErf);
ONNXTRAIN_ELEMENTWISE("", "Abs", (fused::lower_to<kAbs, 1>));
ONNXTRAIN_ELEMENTWISE("", "Sqrt", (fused::lower_to<kSqrt, 1>));
ONNXTRAIN_ELEMENTWISE("", "Reciprocal", (fused::lower_to<kReciprocal, 1>));
ONNXTRAIN_ELEMENTWISE("", "Exp", (fused::lower_to<kExp, 1>));
ONNXTRAIN_ELEMENTWISE("", "Log", (fused::lower_to<kLog, 1>));
ONNXTRAIN_ELEMENTWISE("", "Erf", (fused::lower_to<kErf, 1>));

}  // namespace onnxtrain
