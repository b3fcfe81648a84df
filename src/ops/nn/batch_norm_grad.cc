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
#include "opdef/op_registry.h"
#include "ops/nn/norm_common.h"

namespace onnxtrain {
namespace {

using norm::ChannelLayout;

class BatchNormGradKernel final : public Kernel {
 public:
  explicit BatchNormGradKernel(const KernelInfo& info)
      : epsilon_(info.node.attr_float("epsilon", 1e-5f)), training_(info.node.attr_int("training_mode", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    norm::dispatch_storage(ctx.input(1).dtype(), "BatchNormGrad", [&](auto tag) { run<typename decltype(tag)::type>(ctx); });
  }

 private:
  // dY, X and dX stored as S; scale, the statistics and their gradients in their own type (X's,
  // or float32 beside a 16-bit X).
  template <typename S>
  void run(KernelContext& ctx) const {
    using T = ComputeType<S>;
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale_t = ctx.input(2);
    OT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), "dY ", dy.str(), " does not match X ", x.str());
    OT_CHECK(x.rank() >= 1, "X must have rank >= 1, got ", x.str());
    const ChannelLayout l = norm::channel_layout(x.shape());
    const int64_t C = l.c;
    const auto scratch = norm::channel_scratch<T, 6, 4>(ctx, C);
    double *scale = scratch.doubles[0], *mean = scratch.doubles[1], *inv_std = scratch.doubles[2],
           *var = scratch.doubles[3], *sum_dy = scratch.doubles[4], *sum_dy_xm = scratch.doubles[5];
    T *ta = scratch.values[0], *tb = scratch.values[1], *td = scratch.values[2], *tshift = scratch.values[3];
    norm::read_channel_param_for(scale_t, x.dtype(), C, "scale", scale);

    const bool have_stats = ctx.has_input(3) && ctx.has_input(4);
    OT_CHECK(training_ || have_stats, "inference mode needs the mean and var inputs");
    if (have_stats) {
      norm::read_channel_param_for(ctx.input(3), x.dtype(), C, training_ ? "saved_mean" : "mean", mean);
      norm::read_channel_param_for(ctx.input(4), x.dtype(), C, training_ ? "saved_inv_std" : "var", var);
      for (int64_t c = 0; c < C; ++c)
        inv_std[c] = training_ ? var[c] : 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
    } else {
      norm::channel_moments(ctx.threads(), x.data<S>(), l, mean, var);
      for (int64_t c = 0; c < C; ++c) inv_std[c] = 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
    }
    norm::channel_grad_sums(ctx.threads(), dy.data<S>(), x.data<S>(), l, mean, sum_dy, sum_dy_xm);

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
      norm::channel_affine<S>(ctx.threads(), l, dy.data<S>(), training_ ? x.data<S>() : nullptr, tshift, ta, tb, td,
                              dx.data<S>());
    }
    auto write = [&](int i, const Tensor& like, auto value_of) {
      if (!ctx.output_needed(i)) return;
      norm::write_channel_values(ctx.allocate_output(i, like.dtype(), like.shape()), C, value_of);
    };
    write(1, scale_t, [&](int64_t c) { return inv_std[c] * sum_dy_xm[c]; });
    write(2, scale_t, [&](int64_t c) { return sum_dy[c]; });
    if (!training_) {
      write(3, ctx.input(3), [&](int64_t c) { return -scale[c] * inv_std[c] * sum_dy[c]; });
      write(4, ctx.input(4), [&](int64_t c) {
        return -0.5 * scale[c] * inv_std[c] * inv_std[c] * inv_std[c] * sum_dy_xm[c];
      });
    }
  }

  float epsilon_;
  bool training_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BatchNormGrad", kernel_factory<BatchNormGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "BatchNormGrad", kBothHalfFloats);

// In training mode dscale = sum(dY * xhat) and dB = sum(dY) are per-channel sums for the audit.
static AuditedOutput batch_norm_grad_audited_output(const Node& node, size_t index) {
  return node.attr_int("training_mode", 1) != 0 && (index == 1 || index == 2) ? AuditedOutput::ChannelSums
                                                                               : AuditedOutput::Value;
}
ONNXTRAIN_AUDITED_OUTPUTS(kOnnxTrainDomain, "BatchNormGrad", batch_norm_grad_audited_output);

}  // namespace onnxtrain
