// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims. Its
// gradient is the same mask applied to dY.
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) : upper_(info.node.attr_int("upper", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 2, "input must have rank >= 2, got ", x.str());
    int64_t k = 0;
    if (ctx.has_input(1)) {
      const std::vector<int64_t> kv = int_values(ctx.input(1), "k");
      OT_CHECK(kv.size() == 1, "k must hold one value, got ", ctx.input(1).str());
      k = kv[0];
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
    k = std::clamp<int64_t>(k, -rows - cols, rows + cols);  // same mask, no overflow below
    // Zero bits are the zero of every element type, so the copy only needs the element size.
    dispatch_bytes(x.dtype(), "Trilu", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(y.raw_data());
      const int64_t total_rows = x.numel() / cols;
      ctx.threads().parallel_for(total_rows, std::max<int64_t>(1, kParallelGrain / cols), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t i = r % rows;
          // Kept columns: [i + k, cols) for upper, [0, i + k] for lower.
          const int64_t lo = upper_ ? std::clamp<int64_t>(i + k, 0, cols) : 0;
          const int64_t hi = upper_ ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
          const T* s = src + r * cols;
          T* d = dst + r * cols;
          for (int64_t j = 0; j < cols; ++j) d[j] = j >= lo && j < hi ? s[j] : T(0);
        }
      });
    });
  }

 private:
  bool upper_;
};

void trilu_gradient(GradBuilder& g) {
  std::vector<std::string> inputs{g.output_grad(0)};
  if (g.has_input(1)) inputs.push_back(g.input(1));
  std::string dx = g.op("Trilu", inputs, {{"upper", Attribute::of_int(g.node().attr_int("upper", 1))}});
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Trilu", kernel_factory<TriluKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Trilu", trilu_gradient);

}  // namespace onnxtrain
