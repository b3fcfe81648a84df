#include "audit/batch_norm_terms.h"

#include <algorithm>
#include <cmath>

namespace onnxtrain::audit {
namespace {

// X [N, C, S...] seen as N x C x S, per channel.
struct ChannelView {
  explicit ChannelView(const Tensor& x)
      : batch(x.dim(0)), channels(x.dim(1)), size(x.shape().size_between(2, x.rank())) {}
  template <typename Fn>
  void each(int64_t c, Fn&& fn) const {
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t i = 0; i < size; ++i) fn((n * channels + c) * size + i);
  }
  double count() const { return static_cast<double>(std::max<int64_t>(batch * size, 1)); }
  int64_t batch, channels, size;
};

// Per channel: the batch statistics, and the terms of their float32 computation. The mean is a
// sum, so its terms are mean(|x|); the variance mean((x - mean)^2) then has the terms
// mean((|x| + mean(|x|))^2), and inv_std = (var + eps)^-1/2 inherits half of its relative error:
// variance_error is that relative error of inv_std per unit of rounding (0 when the statistics
// are saved inputs, which the kernel reads as they are).
struct ChannelStatistics {
  std::vector<double> mean, inv_std, mean_abs, variance_error;
};

ChannelStatistics statistics(const Tensor& x, const ChannelView& view, const Tensor& saved_mean,
                             const Tensor& saved_inv_std, double epsilon) {
  const double* px = x.data<double>();
  const size_t channels = static_cast<size_t>(view.channels);
  ChannelStatistics s{std::vector<double>(channels), std::vector<double>(channels), std::vector<double>(channels),
                      std::vector<double>(channels)};
  for (int64_t c = 0; c < view.channels; ++c) {
    const size_t ci = static_cast<size_t>(c);
    double mean = 0, mean_abs = 0;
    view.each(c, [&](int64_t k) {
      mean += px[k];
      mean_abs += std::fabs(px[k]);
    });
    mean /= view.count();
    mean_abs /= view.count();
    const bool saved = saved_mean.defined() && saved_inv_std.defined();
    if (saved) {
      s.mean[ci] = saved_mean.item_as_double(c);
      s.inv_std[ci] = std::fabs(saved_inv_std.item_as_double(c));
      s.mean_abs[ci] = std::fabs(s.mean[ci]);  // read, not summed
      continue;
    }
    double var = 0, var_terms = 0;
    view.each(c, [&](int64_t k) {
      var += (px[k] - mean) * (px[k] - mean);
      var_terms += (std::fabs(px[k]) + mean_abs) * (std::fabs(px[k]) + mean_abs);
    });
    var /= view.count();
    var_terms /= view.count();
    s.mean[ci] = mean;
    s.mean_abs[ci] = mean_abs;
    s.inv_std[ci] = 1.0 / std::sqrt(var + epsilon);
    s.variance_error[ci] = var_terms / (2.0 * (var + epsilon));
  }
  return s;
}

void check_inputs(const char* what, const Tensor& x, const Tensor& dy = Tensor()) {
  OT_CHECK(x.dtype() == DType::Float64 && x.rank() >= 2, what, " terms need a float64 X [N, C, ...], got ", x.str());
  OT_CHECK(!dy.defined() || (dy.dtype() == DType::Float64 && dy.shape() == x.shape()), what,
           " terms need a float64 dY shaped like X ", x.str(), ", got ", dy.str());
}

// What both BatchNormGrad formulas read: dY and X per channel, and the batch statistics.
struct GradientInputs {
  GradientInputs(const Tensor& dy_t, const Tensor& x_t, const Tensor& saved_mean, const Tensor& saved_inv_std,
                 double epsilon)
      : view((check_inputs("BatchNormGrad", x_t, dy_t), x_t)),
        stats(statistics(x_t, view, saved_mean, saved_inv_std, epsilon)),
        x(x_t.data<double>()),
        dy(dy_t.data<double>()) {}
  ChannelView view;
  ChannelStatistics stats;
  const double* x;
  const double* dy;
};

double channel_value(const Tensor& t, int64_t c) { return t.defined() ? t.item_as_double(c) : 0.0; }

bool trains(const Node& node) { return node.attr_int("training_mode", 1) != 0; }

}  // namespace

bool has_batch_norm_terms(const Node& node, size_t index) {
  if (node.domain != kOnnxTrainDomain) return false;
  if (node.op_type == "BatchNormTraining") return index == 0;
  if (node.op_type == "BatchNormGrad") return trains(node) && (index == 0 || index == 1);
  return false;
}

Tensor batch_norm_terms(const Node& node, size_t index, const std::vector<Tensor>& wide_inputs) {
  auto input = [&](size_t i) { return i < wide_inputs.size() ? wide_inputs[i] : Tensor(); };
  const double epsilon = node.attr_float("epsilon", 1e-5f);
  if (node.op_type == "BatchNormTraining") return batch_norm_output_terms(input(0), input(1), input(2), epsilon);
  if (index == 0) return batch_norm_input_grad_terms(input(0), input(1), input(2), input(3), input(4), epsilon);
  return batch_norm_scale_grad_terms(input(0), input(1), input(3), input(4), epsilon);
}

Tensor batch_norm_output_terms(const Tensor& x, const Tensor& scale, const Tensor& bias, double epsilon) {
  check_inputs("BatchNormTraining", x);
  const ChannelView view(x);
  const ChannelStatistics s = statistics(x, view, Tensor(), Tensor(), epsilon);
  const double* px = x.data<double>();
  Tensor terms = Tensor::zeros(DType::Float64, x.shape());
  double* out = terms.data<double>();
  for (int64_t c = 0; c < view.channels; ++c) {
    const size_t ci = static_cast<size_t>(c);
    const double a = std::fabs(channel_value(scale, c)) * s.inv_std[ci];
    const double b = std::fabs(channel_value(bias, c));
    view.each(c, [&](int64_t k) {
      out[k] = a * (std::fabs(px[k]) + s.mean_abs[ci] + std::fabs(px[k] - s.mean[ci]) * s.variance_error[ci]) + b;
    });
  }
  return terms;
}

Tensor batch_norm_input_grad_terms(const Tensor& dy, const Tensor& x, const Tensor& scale, const Tensor& saved_mean,
                                   const Tensor& saved_inv_std, double epsilon) {
  const GradientInputs in(dy, x, saved_mean, saved_inv_std, epsilon);
  const ChannelView& view = in.view;
  const ChannelStatistics& s = in.stats;
  const double *px = in.x, *pdy = in.dy;
  Tensor terms = Tensor::zeros(DType::Float64, x.shape());
  double* out = terms.data<double>();
  for (int64_t c = 0; c < view.channels; ++c) {
    const size_t ci = static_cast<size_t>(c);
    auto xhat_terms = [&](int64_t k) { return (std::fabs(px[k]) + s.mean_abs[ci]) * s.inv_std[ci]; };
    double mean_dy = 0, mean_dy_xhat = 0;
    view.each(c, [&](int64_t k) {
      mean_dy += std::fabs(pdy[k]);
      mean_dy_xhat += std::fabs(pdy[k]) * xhat_terms(k);
    });
    mean_dy /= view.count();
    mean_dy_xhat /= view.count();
    // Recomputed statistics: every term carries inv_std's error too.
    const double k_c = std::fabs(channel_value(scale, c)) * s.inv_std[ci] * (1.0 + s.variance_error[ci]);
    view.each(c, [&](int64_t k) { out[k] = k_c * (std::fabs(pdy[k]) + mean_dy + xhat_terms(k) * mean_dy_xhat); });
  }
  return terms;
}

Tensor batch_norm_scale_grad_terms(const Tensor& dy, const Tensor& x, const Tensor& saved_mean,
                                   const Tensor& saved_inv_std, double epsilon) {
  const GradientInputs in(dy, x, saved_mean, saved_inv_std, epsilon);
  const ChannelView& view = in.view;
  const ChannelStatistics& s = in.stats;
  const double *px = in.x, *pdy = in.dy;
  Tensor terms = Tensor::zeros(DType::Float64, {view.channels});
  double* out = terms.data<double>();
  for (int64_t c = 0; c < view.channels; ++c) {
    const size_t ci = static_cast<size_t>(c);
    double sum = 0;
    view.each(c, [&](int64_t k) { sum += std::fabs(pdy[k]) * std::fabs(px[k] - s.mean[ci]); });
    out[c] = sum * s.inv_std[ci];
  }
  return terms;
}

}  // namespace onnxtrain::audit
