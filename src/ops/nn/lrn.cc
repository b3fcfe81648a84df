// LRN: local response normalization across channels (forward only; no gradient rule).
//   Y[n, c, ...] = X[n, c, ...] / (bias + alpha / size * sum of X[n, i, ...]^2 over the window)^beta
// with the window i in [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to [0, C).
#include <cmath>

#include "opdef/op_registry.h"
#include "ops/nn/norm_common.h"

namespace onnxtrain {
namespace {

class LrnKernel final : public Kernel {
 public:
  explicit LrnKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 1e-4f)),
        beta_(info.node.attr_float("beta", 0.75f)),
        bias_(info.node.attr_float("bias", 1.0f)),
        size_(info.node.attr_int("size", 0)) {
    OT_CHECK(size_ > 0, "attribute size must be a positive number of channels, got ", size_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 2, "X must be N x C x D1 x ... x Dk, got ", x.str());
    dispatch_float(x.dtype(), "LRN", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx) const {
    const Tensor& x = ctx.input(0);
    const norm::ChannelLayout l = norm::channel_layout(x.shape());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;
    const T k = static_cast<T>(bias_), a = static_cast<T>(alpha_ / static_cast<double>(size_));
    const T neg_beta = static_cast<T>(-beta_);
    constexpr int64_t kTile = 256;  // spatial values per pass, so the window sum vectorizes
    ctx.threads().parallel_for(l.n * l.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.s * size_, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 T acc[kTile];
                                 for (int64_t r = r0; r < r1; ++r) {
                                   const int64_t n = r / l.c, c = r % l.c;
                                   const int64_t lo = std::max<int64_t>(0, c - before);
                                   const int64_t hi = std::min<int64_t>(l.c - 1, c + after);
                                   for (int64_t s0 = 0; s0 < l.s; s0 += kTile) {
                                     const int64_t w = std::min(kTile, l.s - s0);
                                     std::fill(acc, acc + w, T(0));
                                     for (int64_t i = lo; i <= hi; ++i) {
                                       const T* xi = px + (n * l.c + i) * l.s + s0;
                                       for (int64_t j = 0; j < w; ++j) acc[j] += xi[j] * xi[j];
                                     }
                                     const T* xr = px + r * l.s + s0;
                                     T* yr = py + r * l.s + s0;
                                     for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] * std::pow(k + a * acc[j], neg_beta);
                                   }
                                 }
                               });
  }

  float alpha_, beta_, bias_;
  int64_t size_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "LRN", kernel_factory<LrnKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
