// Neg and its gradient.
#include "autodiff/grad_builder.h"
#include "ops/common/elementwise.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

void neg(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "Neg", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return static_cast<T>(-x); });
  });
}

void neg_gradient(GradBuilder& g) { g.set_input_grad(0, g.op("Neg", {g.output_grad(0)})); }

}  // namespace

ONNXTRAIN_KERNEL("", "Neg", kernel_factory(&neg));
ONNXTRAIN_GRADIENT("", "Neg", neg_gradient);

}  // namespace onnxtrain
