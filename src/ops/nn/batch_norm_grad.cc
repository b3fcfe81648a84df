// ai.onnxtrain::BatchNormGrad: the fused backward of batch normalization, used by the gradient
// rules of BatchNormalization and BatchNormTraining (batch_norm.cc).
//
//   training_mode=1 (default): inputs (dY, X, scale[, saved_mean, saved_inv_std]), outputs
//     (dX, dscale, dB). Without the saved statistics they are recomputed from X with `epsilon`.
//   training_mode=0: inputs (dY, X, scale, mean, var), outputs (dX, dscale, dB, dmean, dvar):
//     the gradient of the inference-mode affine map, which depends on mean and var too.
//
// With xhat = (x - mean) * inv_std, per channel over its M = N * S values:
//   dB = sum(dY), dscale = sum(dY * xhat)
//   training:  dX = scale * inv_std * (dY - dB / M - xhat * dscale / M)
//   inference: dX = scale * inv_std * dY, dmean = -scale * inv_std * dB,
//              dvar = -scale * inv_std^2 * dscale / 2
#include "ops/nn/norm_common.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

using norm::ChannelLayout;
using norm::ScratchCarver;

class BatchNormGradKernel final : public Kernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info)
      : epsilon_(info.node.attr_float("epsilon", 1e-5f)), training_(info.node.attr_int("training_mode", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    dispatch_float(ctx.input(1).dtype(), "BatchNormGrad", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx) const {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale_t = ctx.input(2);
    OT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), "dY ", dy.str(), " does not match X ", x.str());
    OT_CHECK(x.rank() >= 1, "X must have rank >= 1, got ", x.str());
    const ChannelLayout l = norm::channel_layout(x.shape());
    const int64_t C = l.c;
    const size_t bytes = 6 * ScratchCarver::bytes_for<double>(C) + 4 * ScratchCarver::bytes_for<T>(C);
    ScratchCarver sc(ctx.scratch(bytes), bytes);
    double* scale = sc.take<double>(C);
    double* mean = sc.take<double>(C);
    double* inv_std = sc.take<double>(C);
    double* var = sc.take<double>(C);
    double* sum_dy = sc.take<double>(C);
    double* sum_dy_xm = sc.take<double>(C);
    T* ta = sc.take<T>(C);
    T* tb = sc.take<T>(C);
    T* td = sc.take<T>(C);
    T* tshift = sc.take<T>(C);
    norm::read_channel_param<T>(scale_t, C, "scale", scale);

    const bool have_stats = ctx.has_input(3) && ctx.has_input(4);
    OT_CHECK(training_ || have_stats, "inference mode needs the mean and var inputs");
    if (have_stats) {
      norm::read_channel_param<T>(ctx.input(3), C, training_ ? "saved_mean" : "mean", mean);
      norm::read_channel_param<T>(ctx.input(4), C, training_ ? "saved_inv_std" : "var", var);
      for (int64_t c = 0; c < C; ++c)
        inv_std[c] = training_ ? var[c] : 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
    } else {
      norm::channel_moments(ctx.threads(), x.data<T>(), l, mean, var);
      for (int64_t c = 0; c < C; ++c) inv_std[c] = 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
    }
    norm::channel_grad_sums(ctx.threads(), dy.data<T>(), x.data<T>(), l, mean, sum_dy, sum_dy_xm);

    const double m = static_cast<double>(std::max<int64_t>(l.per_channel(), 1));
    for (int64_t c = 0; c < C; ++c) {
      const double k = scale[c] * inv_std[c];
      ta[c] = static_cast<T>(k);
      tshift[c] = static_cast<T>(mean[c]);
      tb[c] = training_ ? static_cast<T>(-k * inv_std[c] * inv_std[c] * sum_dy_xm[c] / m) : T(0);
      td[c] = training_ ? static_cast<T>(-k * sum_dy[c] / m) : T(0);
    }
    if (ctx.output_needed(0)) {
      Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
      norm::channel_affine<T>(ctx.threads(), l, dy.data<T>(), training_ ? x.data<T>() : nullptr, tshift, ta, tb, td,
                              dx.data<T>());
    }
    auto write = [&](int i, const TensorShape& shape, auto value_of) {
      if (!ctx.output_needed(i)) return;
      T* p = ctx.allocate_output(i, x.dtype(), shape).template data<T>();
      for (int64_t c = 0; c < C; ++c) p[c] = static_cast<T>(value_of(c));
    };
    write(1, scale_t.shape(), [&](int64_t c) { return inv_std[c] * sum_dy_xm[c]; });
    write(2, scale_t.shape(), [&](int64_t c) { return sum_dy[c]; });
    if (!training_) {
      write(3, ctx.input(3).shape(), [&](int64_t c) { return -scale[c] * inv_std[c] * sum_dy[c]; });
      write(4, ctx.input(4).shape(), [&](int64_t c) {
        return -0.5 * scale[c] * inv_std[c] * inv_std[c] * inv_std[c] * sum_dy_xm[c];
      });
    }
  }

  float epsilon_;
  bool training_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BatchNormGrad", kernel_factory<BatchNormGradKernel>());

}  // namespace onnxtrain
