// InstanceNormalization and ai.onnxtrain::InstanceNormGrad, the fused backward its gradient rule
// uses. Every (n, c) plane of X is normalized over its spatial values; scale and B are per channel.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/norm_common.h"

namespace onnxtrain {
namespace {

using norm::ChannelLayout;
using norm::ScratchCarver;

ChannelLayout instance_layout(const Tensor& x) {
  OT_CHECK(x.rank() >= 2, "input must be N x C x D1 x ... x Dn, got ", x.str());
  return norm::channel_layout(x.shape());
}

class InstanceNormKernel final : public Kernel {
 public:
  explicit InstanceNormKernel(const KernelInfo& info) : epsilon_(info.node.attr_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) const override {
    dispatch_float(ctx.input(0).dtype(), "InstanceNormalization", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx) const {
    const Tensor& x = ctx.input(0);
    const ChannelLayout l = instance_layout(x);
    const size_t bytes = 2 * ScratchCarver::bytes_for<double>(l.c);
    ScratchCarver sc(ctx.scratch(bytes), bytes);
    double* scale = sc.take<double>(l.c);
    double* bias = sc.take<double>(l.c);
    norm::read_channel_param<T>(ctx.input(1), l.c, "scale", scale);
    norm::read_channel_param<T>(ctx.input(2), l.c, "B", bias);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const double inv_s = 1.0 / static_cast<double>(std::max<int64_t>(l.s, 1));
    ctx.threads().parallel_for(l.n * l.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.s, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 for (int64_t r = r0; r < r1; ++r) {
                                   const int64_t c = r % l.c;
                                   const T* xr = px + r * l.s;
                                   T* yr = py + r * l.s;
                                   double mean, sq;
                                   norm::row_moments(xr, l.s, mean, sq);
                                   const double k = scale[c] / std::sqrt(sq * inv_s + epsilon_);
                                   const T a = static_cast<T>(k), m = static_cast<T>(mean), b = static_cast<T>(bias[c]);
                                   for (int64_t i = 0; i < l.s; ++i) yr[i] = (xr[i] - m) * a + b;
                                 }
                               });
  }

  float epsilon_;
};

// Inputs (dY, X, scale) -> (dX, dscale, dB). Per plane, with S spatial values, recomputed mean
// and inv_std, s1 = sum(dY) and s2 = sum(dY * (x - mean)):
//   dX = scale * inv_std * (dY - s1 / S - (x - mean) * inv_std^2 * s2 / S)
//   dscale[c] = sum over n of inv_std * s2,  dB[c] = sum over n of s1.
class InstanceNormGradKernel final : public Kernel {
 public:
  explicit InstanceNormGradKernel(const KernelInfo& info) : epsilon_(info.node.attr_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) const override {
    dispatch_float(ctx.input(1).dtype(), "InstanceNormGrad", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx) const {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale_t = ctx.input(2);
    OT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), "dY ", dy.str(), " does not match X ", x.str());
    const ChannelLayout l = instance_layout(x);
    const int64_t planes = l.n * l.c;
    const size_t bytes = ScratchCarver::bytes_for<double>(l.c) + 2 * ScratchCarver::bytes_for<double>(planes);
    ScratchCarver sc(ctx.scratch(bytes), bytes);
    double* scale = sc.take<double>(l.c);
    double* plane_dscale = sc.take<double>(planes);
    double* plane_db = sc.take<double>(planes);
    norm::read_channel_param<T>(scale_t, l.c, "scale", scale);
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    T* pdx = ctx.output_needed(0) ? ctx.allocate_output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    const double inv_s = 1.0 / static_cast<double>(std::max<int64_t>(l.s, 1));
    ctx.threads().parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.s, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 for (int64_t r = r0; r < r1; ++r) {
                                   const T* g = pdy + r * l.s;
                                   const T* xr = px + r * l.s;
                                   double mean, sq, s1, s2;
                                   norm::row_moments(xr, l.s, mean, sq);
                                   const double inv = 1.0 / std::sqrt(sq * inv_s + epsilon_);
                                   const T m = static_cast<T>(mean);
                                   norm::row_sum2<T>(l.s, [g](auto at) { return at(g); },
                                                     [g, xr, m](auto at) { return at(g) * (at(xr) - m); }, s1, s2);
                                   plane_dscale[r] = inv * s2;
                                   plane_db[r] = s1;
                                   if (!pdx) continue;
                                   const double k = scale[r % l.c] * inv;
                                   const T a = static_cast<T>(k), c1 = static_cast<T>(k * s1 * inv_s),
                                           c2 = static_cast<T>(k * inv * inv * s2 * inv_s);
                                   T* dxr = pdx + r * l.s;
                                   for (int64_t i = 0; i < l.s; ++i) dxr[i] = a * g[i] - c1 - (xr[i] - m) * c2;
                                 }
                               });
    for (int o = 1; o < 3; ++o) {
      if (!ctx.output_needed(o)) continue;
      const double* per_plane = o == 1 ? plane_dscale : plane_db;
      T* out = ctx.allocate_output(o, x.dtype(), scale_t.shape()).template data<T>();
      for (int64_t c = 0; c < l.c; ++c) {
        double s = 0;
        for (int64_t n = 0; n < l.n; ++n) s += per_plane[n * l.c + c];
        out[c] = static_cast<T>(s);
      }
    }
  }

  float epsilon_;
};

void instance_norm_gradient(GradBuilder& g) {
  AttributeMap attrs{{"epsilon", Attribute::of_float(g.node().attr_float("epsilon", 1e-5f))}};
  std::vector<std::string> d =
      g.op_multi("InstanceNormGrad", {g.output_grad(0), g.input(0), g.input(1)}, 3, attrs, kOnnxTrainDomain);
  for (int i = 0; i < 3; ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, d[static_cast<size_t>(i)]);
}

}  // namespace

ONNXTRAIN_KERNEL("", "InstanceNormalization", kernel_factory<InstanceNormKernel>(),
                 Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "InstanceNormGrad", kernel_factory<InstanceNormGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "InstanceNormalization", instance_norm_gradient);

}  // namespace onnxtrain
