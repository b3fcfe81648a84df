// Add, Sub, Mul, Div: broadcasting arithmetic and their gradients.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/fused/instruction_forms.h"

namespace onnxtrain {
namespace {

template <typename Op>
void arithmetic(KernelContext& ctx) {
  dispatch_numeric(ctx.input(0).dtype(), "arithmetic", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T a, T b) { return static_cast<T>(Op::apply(a, b)); });
  });
}

struct AddOp { template <typename T> static T apply(T a, T b) { return a + b; } };
struct SubOp { template <typename T> static T apply(T a, T b) { return a - b; } };
struct MulOp { template <typename T> static T apply(T a, T b) { return a * b; } };
struct DivOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      OT_CHECK(b != 0, "integer division by zero");
      // INT_MIN / -1 traps in C++; PyTorch wraps to INT_MIN.
      if constexpr (std::is_signed_v<T>) if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
    }
    return a / b;
  }
};

void add_gradient(GradBuilder& g) {
  for (int i = 0; i < 2; ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, g.reduce_to_input_shape(g.output_grad(0), i));
}

void sub_gradient(GradBuilder& g) {
  if (g.needs_input_grad(0)) g.set_input_grad(0, g.reduce_to_input_shape(g.output_grad(0), 0));
  if (g.needs_input_grad(1)) g.set_input_grad(1, g.reduce_to_input_shape(g.op("Neg", {g.output_grad(0)}), 1));
}

void mul_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  if (g.needs_input_grad(0)) g.set_input_grad(0, g.reduce_to_input_shape(g.op("Mul", {dy, g.input(1)}), 0));
  if (g.needs_input_grad(1)) g.set_input_grad(1, g.reduce_to_input_shape(g.op("Mul", {dy, g.input(0)}), 1));
}

// y = a / b:  da = dy / b,  db = -dy * y / b
void div_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  std::string dy_over_b = g.op("Div", {dy, g.input(1)});
  if (g.needs_input_grad(0)) g.set_input_grad(0, g.reduce_to_input_shape(dy_over_b, 0));
  if (g.needs_input_grad(1))
    g.set_input_grad(1, g.reduce_to_input_shape(g.op("Neg", {g.op("Mul", {dy_over_b, g.output(0)})}), 1));
}

// In a fused loop (FusedElementwise): the kernels' own formulas.
template <typename Op>
struct ArithmeticForms {
  static constexpr bool kVector = false;
  template <typename T>
  static T scalar(T a, T b, float, float) { return Op::apply(a, b); }
};
const ElementwiseInstruction kAdd = fused::binary_instruction<ArithmeticForms<AddOp>>("Add");
const ElementwiseInstruction kSub = fused::binary_instruction<ArithmeticForms<SubOp>>("Sub");
const ElementwiseInstruction kMul = fused::binary_instruction<ArithmeticForms<MulOp>>("Mul");
const ElementwiseInstruction kDiv = fused::binary_instruction<ArithmeticForms<DivOp>>("Div");

}  // namespace

ONNXTRAIN_KERNEL("", "Add", kernel_factory(&arithmetic<AddOp>), Recompute::Cheap, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "Sub", kernel_factory(&arithmetic<SubOp>), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Mul", kernel_factory(&arithmetic<MulOp>), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Div", kernel_factory(&arithmetic<DivOp>), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Add", add_gradient);
ONNXTRAIN_GRADIENT("", "Sub", sub_gradient);
ONNXTRAIN_GRADIENT("", "Mul", mul_gradient);
ONNXTRAIN_GRADIENT("", "Div", div_gradient);

ONNXTRAIN_INSTRUCTION(kAdd);
ONNXTRAIN_INSTRUCTION(kSub);
ONNXTRAIN_INSTRUCTION(kMul);
ONNXTRAIN_INSTRUCTION(kDiv);
ONNXTRAIN_ELEMENTWISE("", "Add", (fused::lower_to<kAdd, 2>));
ONNXTRAIN_ELEMENTWISE("", "Sub", (fused::lower_to<kSub, 2>));
ONNXTRAIN_ELEMENTWISE("", "Mul", (fused::lower_to<kMul, 2>));
ONNXTRAIN_ELEMENTWISE("", "Div", (fused::lower_to<kDiv, 2>));

}  // namespace onnxtrain
