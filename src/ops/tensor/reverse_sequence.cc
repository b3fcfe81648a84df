// ReverseSequence: for each batch entry b, the first sequence_lens[b] steps along the time axis
// come out in reverse order and the rest unchanged. The op is its own inverse permutation for
// fixed lengths, so its gradient is ReverseSequence of dY with the same lengths.
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class ReverseSequenceKernel final : public Kernel {
 public:
  explicit ReverseSequenceKernel(const KernelInfo& info)
      : batch_axis_(info.node.attr_int("batch_axis", 1)), time_axis_(info.node.attr_int("time_axis", 0)) {
    OT_CHECK((batch_axis_ == 0 && time_axis_ == 1) || (batch_axis_ == 1 && time_axis_ == 0),
             "ReverseSequence: batch_axis and time_axis must be 0 and 1 (in either order), got batch_axis ",
             batch_axis_, " and time_axis ", time_axis_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 2, "ReverseSequence: input must have rank >= 2, got ", x.str());
    const int64_t batch = x.dim(static_cast<int>(batch_axis_)), time = x.dim(static_cast<int>(time_axis_));
    const std::vector<int64_t> lens = int_values(ctx.input(1), "ReverseSequence sequence_lens");
    OT_CHECK(static_cast<int64_t>(lens.size()) == batch, "ReverseSequence: sequence_lens ", ctx.input(1).str(),
             " must hold one length per batch entry (", batch, ")");
    for (size_t b = 0; b < lens.size(); ++b)
      OT_CHECK(lens[b] >= 0 && lens[b] <= time, "ReverseSequence: sequence_lens[", b, "] = ", lens[b],
               " is outside [0, ", time, "], the length of the time axis");
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    // Every (time, batch) pair owns a contiguous row of the trailing dims.
    const int64_t row = x.shape().size_between(2, x.rank());
    const size_t row_bytes = static_cast<size_t>(row) * dtype_size(x.dtype());
    const int64_t time_stride = time_axis_ == 0 ? batch : 1, batch_stride = batch_axis_ == 0 ? time : 1;
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    ctx.threads().parallel_for(batch * time, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 for (int64_t r = r0; r < r1; ++r) {
                                   const int64_t b = r / time, t = r % time;
                                   const int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
                                   std::memcpy(dst + (t * time_stride + b * batch_stride) * row_bytes,
                                               src + (from * time_stride + b * batch_stride) * row_bytes, row_bytes);
                                 }
                               });
  }

 private:
  int64_t batch_axis_, time_axis_;
};

void reverse_sequence_gradient(GradBuilder& g) {
  std::string dx = g.op("ReverseSequence", {g.output_grad(0), g.input(1)},
                        {{"batch_axis", Attribute::of_int(g.node().attr_int("batch_axis", 1))},
                         {"time_axis", Attribute::of_int(g.node().attr_int("time_axis", 0))}});
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReverseSequence", kernel_factory<ReverseSequenceKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "ReverseSequence", reverse_sequence_gradient);

}  // namespace onnxtrain
