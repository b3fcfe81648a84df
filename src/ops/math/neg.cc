// Neg and its gradient.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/fused/instruction_forms.h"

namespace onnxtrain {
namespace {

void neg(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "Neg", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [](T x) { return static_cast<T>(-x); });
  });
}

void neg_gradient(GradBuilder& g) { g.set_input_grad(0, g.op("Neg", {g.output_grad(0)})); }

struct NegForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T x, float, float) { return -x; }
};
const ElementwiseInstruction kNeg = fused::unary_instruction<NegForms>("Neg");

}  // namespace

ONNXTRAIN_KERNEL("", "Neg", kernel_factory(&neg), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Neg", neg_gradient);

ONNXTRAIN_INSTRUCTION(kNeg);
ONNXTRAIN_ELEMENTWISE("", "Neg", (fused::lower_to<kNeg, 1>));

}  // namespace onnxtrain
