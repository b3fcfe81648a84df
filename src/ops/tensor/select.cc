// Ops whose output size depends on the data: NonZero and Compress. Forward only (NonZero's
// output is integral; Compress's gradient is not part of onnxtrain yet).
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

void nonzero(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t n = x.numel();
  // Scalars count as one-element vectors, as numpy.nonzero (the ONNX reference) treats them.
  const int rank = std::max(x.rank(), 1);
  const TensorShape shape = x.rank() == 0 ? TensorShape{1} : x.shape();
  // Chunks count their hits in parallel, then write at their prefix-sum positions.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
  auto* count = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(chunks + 1) * sizeof(int64_t)));
  // float16 and bfloat16 are read as their bits: zero is +0 or -0, anything else (NaN too) is not.
  const bool half = is_16bit_float(x.dtype());
  dispatch_all(half ? DType::UInt16 : x.dtype(), "NonZero",
               [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 const T* p = static_cast<const T*>(x.raw_data());
                 auto hit = [&](int64_t i) -> bool {
                   if constexpr (std::is_same_v<T, uint16_t>) return half ? (p[i] & 0x7FFF) != 0 : p[i] != 0;
                   else return p[i] != T(0);
                 };
                 count[0] = 0;
                 ctx.threads().parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
                   for (int64_t c = c0; c < c1; ++c) {
                     int64_t k = 0;
                     for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) k += hit(i) ? 1 : 0;
                     count[c + 1] = k;
                   }
                 });
                 for (int64_t c = 0; c < chunks; ++c) count[c + 1] += count[c];
                 const int64_t total = count[chunks];
                 Tensor& y = ctx.allocate_output(0, DType::Int64, {rank, total});
                 int64_t* out = y.data<int64_t>();
                 ctx.threads().parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
                   for (int64_t c = c0; c < c1; ++c) {
                     int64_t at = count[c];
                     for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
                       if (!hit(i)) continue;
                       int64_t rem = i;
                       for (int d = rank - 1; d >= 0; --d) {
                         out[d * total + at] = rem % shape[d];
                         rem /= shape[d];
                       }
                       ++at;
                     }
                   }
                 });
               });
}

class CompressKernel final : public Kernel {
 public:
  explicit CompressKernel(const KernelInfo& info)
      : has_axis_(info.node.has_attr("axis")), axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    OT_CHECK(cond.dtype() == DType::Bool && cond.rank() == 1, "condition must be a 1-D bool tensor, got ", cond.str());
    // Without an axis the input is flattened first.
    const TensorShape in = has_axis_ ? x.shape() : TensorShape{x.numel()};
    OT_CHECK(in.rank() >= 1, "input must have rank >= 1 when an axis is given, got ", x.str());
    const int axis = has_axis_ ? normalize_axis(axis_, in.rank(), "Compress") : 0;
    const int64_t n = in[axis];
    const bool* c = cond.data<bool>();
    // Entries past the axis may only be false (numpy.compress, the reference, rejects true ones).
    auto* picked = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(cond.numel()) * sizeof(int64_t)));
    int64_t m = 0;
    for (int64_t i = 0; i < cond.numel(); ++i) {
      if (!c[i]) continue;
      OT_CHECK(i < n, "condition is true at index ", i, ", past the size ", n, " of axis ", axis, " of ", x.str());
      picked[m++] = i;
    }
    TensorShape shape = in;
    shape[axis] = m;
    Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
    if (y.numel() == 0) return;
    const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
    const int64_t outer = in.size_between(0, axis), inner = in.size_between(axis + 1, in.rank()) * es;
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    auto* dst = static_cast<uint8_t*>(y.raw_data());
    ctx.threads().parallel_for(outer * m, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / m, j = picked[r % m];
        std::memcpy(dst + r * inner, src + (o * n + j) * inner, static_cast<size_t>(inner));
      }
    });
  }

 private:
  bool has_axis_;
  int64_t axis_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "NonZero", kernel_factory(&nonzero), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "NonZero", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Compress", kernel_factory<CompressKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
