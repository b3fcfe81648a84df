// ReduceSumTo(X, shape): sums X down to a shape X was broadcast from. The gradient builder's one
// helper for gradients of broadcasting inputs (GradBuilder::reduce_to_input_shape). bfloat16 and
// float16 X are summed in float32 as they are read and rounded once, as autocast's eager sums are,
// or written as float32 sums where the node says to = FLOAT (passes/float32_sums.cc).
#include "core/dtype.h"
#include "opdef/op_registry.h"
#include "ops/common/float32_sums.h"
#include "ops/common/reduce.h"
#include "runtime/half_convert.h"

namespace onnxtrain {
namespace {

// Into y: float32 (the sums as they are) or the 16-bit type S (rounded once).
template <typename S>
void sum_16bit_to(KernelContext& ctx, const Tensor& x, const ReduceGroups& groups, Tensor& y) {
  const int64_t extra = reduce_scratch_elems(groups);
  const bool rounded = y.dtype() != DType::Float32;
  float* scratch = static_cast<float*>(
      ctx.scratch(static_cast<size_t>((rounded ? y.numel() : 0) + extra) * sizeof(float)));
  float* sums = rounded ? scratch : y.data<float>();
  float* fold_scratch = extra ? scratch + (rounded ? y.numel() : 0) : nullptr;
  reduce_axes(ctx.threads(), x.data<S>(), groups, sums, fold_scratch, SumOp<float>{});
  if (rounded) round_into(ctx.threads(), sums, y);
}

class ReduceSumToKernel final : public Kernel {
 public:
  explicit ReduceSumToKernel(const KernelInfo& info) : sums_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    TensorShape target(ctx.input(1).to_int64_vector());
    const DType out_type = sums_.output_type(x.dtype());
    if (target == x.shape() && out_type == x.dtype()) {
      ctx.alias_input(0, 0, target);
      return;
    }
    const ReduceGroups groups = reduce_groups(x.shape(), axes_to_reduce_to(x.shape(), target, "ReduceSumTo"));
    Tensor& y = ctx.allocate_output(0, out_type, target);
    if (x.dtype() == DType::BFloat16) return sum_16bit_to<BHalf>(ctx, x, groups, y);
    if (x.dtype() == DType::Float16) return sum_16bit_to<Half>(ctx, x, groups, y);
    dispatch_float(x.dtype(), "ReduceSumTo", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t extra = reduce_scratch_elems(groups);
      T* scratch = extra ? static_cast<T*>(ctx.scratch(static_cast<size_t>(extra) * sizeof(T))) : nullptr;
      reduce_axes(ctx.threads(), x.data<T>(), groups, y.data<T>(), scratch, SumOp<T>{});
    });
  }

 private:
  Float32Sums sums_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceSumTo", kernel_factory<ReduceSumToKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_FLOAT32_SUMS(kOnnxTrainDomain, "ReduceSumTo");
// Reads 16-bit values itself: the executor's widening would copy the whole gradient to float32
// first, where the sum only needs each value once.
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "ReduceSumTo", kBothHalfFloats);

}  // namespace onnxtrain
