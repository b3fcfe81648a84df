// CumSum along an axis given as input 1 (inclusive or exclusive, forward or reverse), and its
// gradient: the cumulative sum of dY in the opposite direction, with the same exclusivity.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/common/reduce.h"

namespace onnxtrain {
namespace {

class CumSumKernel final : public Kernel {
 public:
  explicit CumSumKernel(const KernelInfo& info)
      : exclusive_(info.node.attr_int("exclusive", 0) != 0), reverse_(info.node.attr_int("reverse", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& axis_t = ctx.input(1);
    OT_CHECK(axis_t.dtype() == DType::Int64 || axis_t.dtype() == DType::Int32, "input 'axis' must be int32 or int64, got ",
             axis_t.str());
    OT_CHECK(axis_t.numel() == 1 && axis_t.rank() <= 1, "input 'axis' must hold one value, got ", axis_t.str());
    OT_CHECK(x.rank() >= 1, "the input must have rank >= 1, got ", x.str());
    const int axis = normalize_axis(axis_t.item_as_int(0), x.rank(), "CumSum");
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const AxisSplit s = split_at_axis(x.shape(), axis);
    if (y.numel() == 0) return;
    const bool exclusive = exclusive_, reverse = reverse_;
    dispatch_numeric(x.dtype(), "CumSum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      // Each slice [n, inner] is scanned row by row; a row adds to the previous output row, so
      // the loop over `inner` vectorizes.
      constexpr int64_t kCols = 512;
      const int64_t blocks = (s.inner + kCols - 1) / kCols;
      ctx.threads().parallel_for(
          s.outer * blocks, std::max<int64_t>(1, kParallelGrain / (s.n * std::min(s.inner, kCols))),
          [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
              const int64_t o = t / blocks, c0 = (t % blocks) * kCols;
              const int64_t width = std::min(s.inner, c0 + kCols) - c0;
              const T* xs = px + o * s.n * s.inner + c0;
              T* ys = py + o * s.n * s.inner + c0;
              for (int64_t step = 0; step < s.n; ++step) {
                const int64_t k = reverse ? s.n - 1 - step : step;
                const int64_t prev = reverse ? k + 1 : k - 1;  // previous row in scan order
                T* out = ys + k * s.inner;
                if (step == 0) {
                  const T* in = xs + k * s.inner;
                  for (int64_t c = 0; c < width; ++c) out[c] = exclusive ? T(0) : in[c];
                  continue;
                }
                const T* before = ys + prev * s.inner;
                const T* in = xs + (exclusive ? prev : k) * s.inner;
                for (int64_t c = 0; c < width; ++c) out[c] = static_cast<T>(before[c] + in[c]);
              }
            }
          });
    });
  }

 private:
  bool exclusive_;
  bool reverse_;
};

// y_k = sum over j before k (in scan order) of x_j, so dx_j = sum over k after j of dy_k:
// the opposite scan; exclusive stays exclusive.
void cumsum_gradient(GradBuilder& g) {
  const Node& n = g.node();
  AttributeMap attrs{{"exclusive", Attribute::of_int(n.attr_int("exclusive", 0))},
                     {"reverse", Attribute::of_int(n.attr_int("reverse", 0) != 0 ? 0 : 1)}};
  g.set_input_grad(0, g.op("CumSum", {g.output_grad(0), g.input(1)}, attrs));
}

}  // namespace

ONNXTRAIN_KERNEL("", "CumSum", kernel_factory<CumSumKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "CumSum", cumsum_gradient);

}  // namespace onnxtrain
