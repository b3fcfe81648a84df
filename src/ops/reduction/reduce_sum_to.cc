// ReduceSumTo(X, shape): sums X down to a shape X was broadcast from. The gradient builder's one
// helper for gradients of broadcasting inputs (GradBuilder::reduce_to_input_shape).
#include "ops/common/reduce.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

void reduce_sum_to(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TensorShape target(ctx.input(1).to_int64_vector());
  if (target == x.shape()) {
    ctx.alias_input(0, 0, target);
    return;
  }
  std::vector<bool> axes = axes_to_reduce_to(x.shape(), target, "ReduceSumTo");
  Tensor& y = ctx.allocate_output(0, x.dtype(), target);
  dispatch_float(x.dtype(), "ReduceSumTo", [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_sum<T>(ctx.threads(), x.data<T>(), x.shape(), axes, y.data<T>());
  });
}

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceSumTo", kernel_factory(&reduce_sum_to));

}  // namespace onnxtrain
