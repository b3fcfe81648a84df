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
  const ReduceGroups groups = reduce_groups(x.shape(), axes_to_reduce_to(x.shape(), target, "ReduceSumTo"));
  Tensor& y = ctx.allocate_output(0, x.dtype(), target);
  dispatch_float(x.dtype(), "ReduceSumTo", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t extra = reduce_scratch_elems(groups);
    T* scratch = extra ? static_cast<T*>(ctx.scratch(static_cast<size_t>(extra) * sizeof(T))) : nullptr;
    reduce_axes(ctx.threads(), x.data<T>(), groups, y.data<T>(), scratch, SumOp<T>{});
  });
}

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceSumTo", kernel_factory(&reduce_sum_to));

}  // namespace onnxtrain
