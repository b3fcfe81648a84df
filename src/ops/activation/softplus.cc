// Softplus and Softsign, with fused backward kernels.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

// log(1 + e^x) without overflow for large x or loss of digits for very negative x; float32
// vectors take fast::softplus, the same formula.
template <typename T>
T softplus_of(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
fast::VF softplus_of(fast::VF x) { return fast::softplus(x); }

void softplus(KernelContext& ctx) {
  float_unary_vectorized(ctx, "Softplus", [](auto x) { return softplus_of(x); });
}

// SoftplusGrad(dY, Y): dX = dY * sigmoid(x) = dY * (1 - e^-y), exact in y since e^-y = 1 / (1 + e^x),
// and expm1 keeps the small values accurate. PyTorch switches to dX = dY above x = 20 (its
// forward's threshold, which ONNX's Softplus lacks); the difference there is below 2e-9.
void softplus_grad(KernelContext& ctx) {
  float_binary_vectorized(ctx, "SoftplusGrad", [](auto dy, auto y) {
    using fast::expm1;
    using std::expm1;
    return -dy * expm1(-y);
  });
}

void softplus_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("SoftplusGrad", {g.output_grad(0), g.output(0)}, {}, kOnnxTrainDomain));
}

void softsign(KernelContext& ctx) {
  float_unary(ctx, "Softsign", [](auto x) { return x / (decltype(x)(1) + std::abs(x)); });
}

// SoftsignGrad(dY, X): dY / (1 + |x|)^2. From X rather than Y: 1 - |y| cancels for large |x|.
void softsign_grad(KernelContext& ctx) {
  float_binary(ctx, "SoftsignGrad", [](auto dy, auto x) {
    auto d = decltype(x)(1) + std::abs(x);
    return dy / (d * d);
  });
}

void softsign_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("SoftsignGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Softplus", kernel_factory(&softplus), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftplusGrad", kernel_factory(&softplus_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Softplus", softplus_gradient);
ONNXTRAIN_KERNEL("", "Softsign", kernel_factory(&softsign), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftsignGrad", kernel_factory(&softsign_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Softsign", softsign_gradient);

}  // namespace onnxtrain
