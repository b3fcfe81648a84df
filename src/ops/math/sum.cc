// Sum (n-ary, broadcasting): also how the gradient builder accumulates fan-out gradients.
#include <cstring>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

void sum(KernelContext& ctx) {
  const Tensor& first = ctx.input(0);
  std::vector<TensorShape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    OT_CHECK(ctx.input(i).dtype() == first.dtype(), "inputs have different element types: ", first.str(), " and ",
             ctx.input(i).str());
    shapes.push_back(ctx.input(i).shape());
  }
  TensorShape shape = broadcast_shapes(shapes, "Sum");
  Tensor& out = ctx.allocate_output(0, first.dtype(), shape);
  dispatch_numeric(first.dtype(), "Sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    auto add = [](T a, T b) { return static_cast<T>(a + b); };
    if (ctx.num_inputs() == 1) {
      std::memcpy(o, first.data<T>(), out.nbytes());
      return;
    }
    binary_broadcast(ctx.threads(), first.data<T>(), first.shape(), ctx.input(1).data<T>(), ctx.input(1).shape(), o,
                     shape, add);
    for (int i = 2; i < ctx.num_inputs(); ++i)
      binary_broadcast(ctx.threads(), static_cast<const T*>(o), shape, ctx.input(i).data<T>(), ctx.input(i).shape(), o,
                       shape, add);
  });
}

void sum_gradient(GradBuilder& g) {
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, g.reduce_to_input_shape(g.output_grad(0), i));
}

// A Sum of two is how gradients accumulate: in a fused loop it is an Add (ops/math/binary.cc).
bool lower_sum(const Node& node, LoweredInstruction& out) {
  if (node.inputs.size() != 2) return false;
  out = {OpRegistry::instance().instruction("Add")};
  return out.instruction != nullptr;
}

}  // namespace

ONNXTRAIN_KERNEL("", "Sum", kernel_factory(&sum), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "Sum", sum_gradient);

ONNXTRAIN_ELEMENTWISE("", "Sum", lower_sum);

}  // namespace onnxtrain
