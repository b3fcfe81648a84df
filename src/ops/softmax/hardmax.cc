// Hardmax: 1 at the first maximum along the axis, 0 elsewhere. Before opset 13 the input is
// coerced to 2-D at `axis` (default 1); since 13 it works along one axis (default -1).
// Forward only: the output is piecewise constant.
#include <algorithm>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/common/reduce.h"

namespace onnxtrain {
namespace {

class HardmaxKernel final : public Kernel {
 public:
  explicit HardmaxKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", info.opset < 13 ? 1 : -1)), coerce_2d_(info.opset < 13) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    AxisSplit s;
    if (coerce_2d_) {
      const int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
      OT_CHECK(a >= 0 && a <= x.rank(), "axis ", axis_, " is out of range for rank ", x.rank());
      s = split_flatten_from(x.shape(), static_cast<int>(a));
    } else {
      OT_CHECK(x.rank() >= 1, "the input must have rank >= 1, got a scalar");
      s = split_at_axis(x.shape(), normalize_axis(axis_, x.rank(), "Hardmax"));
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    dispatch_float(x.dtype(), "Hardmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      ctx.threads().parallel_for(s.outer * s.inner, std::max<int64_t>(1, kParallelGrain / s.n), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / s.inner, i = t % s.inner;
          const T* p = px + o * s.n * s.inner + i;
          T* q = py + o * s.n * s.inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < s.n; ++k)
            if (p[k * s.inner] > p[best * s.inner]) best = k;
          for (int64_t k = 0; k < s.n; ++k) q[k * s.inner] = k == best ? T(1) : T(0);
        }
      });
    });
  }

 private:
  int64_t axis_;
  bool coerce_2d_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Hardmax", kernel_factory<HardmaxKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
