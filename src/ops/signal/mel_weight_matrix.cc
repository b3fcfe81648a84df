// MelWeightMatrix (opset 17): a [dft_length / 2 + 1, num_mel_bins] matrix of triangular filters
// that maps a onesided spectrum onto the mel scale, mel(f) = 2595 log10(1 + f / 700). It follows
// ONNX's reference: num_mel_bins + 2 edges spaced evenly in mel from lower_edge_hertz (the step
// being the range over num_mel_bins + 2), mapped to spectrum bins floor((dft_length + 1) * hz /
// sample_rate); filter i rises from edge i to edge i + 1 (peak 1) and falls to edge i + 2.
#include <cmath>
#include <vector>

#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

int64_t int_scalar(const Tensor& t, const char* what) {
  OT_CHECK(t.numel() == 1 && (t.dtype() == DType::Int32 || t.dtype() == DType::Int64), "MelWeightMatrix: ", what,
           " must be an int32 or int64 scalar, got ", t.str());
  return t.item_as_int(0);
}

double float_scalar(const Tensor& t, const char* what) {
  OT_CHECK(t.numel() == 1 && is_floating(t.dtype()), "MelWeightMatrix: ", what, " must be a float scalar, got ", t.str());
  return t.item_as_double(0);
}

double hertz_to_mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hertz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

class MelWeightMatrixKernel final : public Kernel {
 public:
  explicit MelWeightMatrixKernel(const KernelInfo& info)
      : dtype_(dtype_from_onnx(static_cast<int32_t>(info.node.attr_int("output_datatype", 1)))) {}

  void compute(KernelContext& ctx) const override {
    const int64_t mel_bins = int_scalar(ctx.input(0), "num_mel_bins");
    const int64_t dft_length = int_scalar(ctx.input(1), "dft_length");
    const int64_t sample_rate = int_scalar(ctx.input(2), "sample_rate");
    const double lower = float_scalar(ctx.input(3), "lower_edge_hertz");
    const double upper = float_scalar(ctx.input(4), "upper_edge_hertz");
    OT_CHECK(mel_bins >= 1 && dft_length >= 1 && sample_rate >= 1, "MelWeightMatrix: num_mel_bins (", mel_bins,
             "), dft_length (", dft_length, ") and sample_rate (", sample_rate, ") must be positive");
    OT_CHECK(lower >= 0 && lower <= upper, "MelWeightMatrix: the edges must satisfy 0 <= lower_edge_hertz (", lower,
             ") <= upper_edge_hertz (", upper, ")");
    const int64_t spectrum_bins = dft_length / 2 + 1;
    const double low_mel = hertz_to_mel(lower), step = (hertz_to_mel(upper) - low_mel) / static_cast<double>(mel_bins + 2);
    std::vector<int64_t> edges(static_cast<size_t>(mel_bins + 2));
    for (int64_t i = 0; i < mel_bins + 2; ++i) {
      const double hz = mel_to_hertz(static_cast<double>(i) * step + low_mel);
      edges[static_cast<size_t>(i)] =
          static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
    }
    OT_CHECK(edges.back() <= spectrum_bins, "MelWeightMatrix: upper_edge_hertz ", upper, " lies past the ",
             spectrum_bins, " bins of a onesided spectrum of dft_length ", dft_length, " at sample_rate ", sample_rate,
             " (the Nyquist frequency is ", sample_rate / 2, ")");
    std::vector<double> w(static_cast<size_t>(spectrum_bins * mel_bins), 0.0);
    auto at = [&](int64_t bin, int64_t mel) -> double& {
      OT_CHECK(bin >= 0 && bin < spectrum_bins, "MelWeightMatrix: filter ", mel, " reaches bin ", bin, " of ",
               spectrum_bins, "; upper_edge_hertz lies past the Nyquist frequency");
      return w[static_cast<size_t>(bin * mel_bins + mel)];
    };
    for (int64_t i = 0; i < mel_bins; ++i) {
      const int64_t left = edges[static_cast<size_t>(i)], center = edges[static_cast<size_t>(i + 1)],
                    right = edges[static_cast<size_t>(i + 2)];
      if (center == left) at(center, i) = 1;
      else
        for (int64_t j = left; j <= center; ++j) at(j, i) = static_cast<double>(j - left) / static_cast<double>(center - left);
      for (int64_t j = center; j < right; ++j) at(j, i) = static_cast<double>(right - j) / static_cast<double>(right - center);
    }
    Tensor& y = ctx.allocate_output(0, dtype_, {spectrum_bins, mel_bins});
    dispatch_float(dtype_, "MelWeightMatrix output_datatype", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = y.data<T>();
      for (size_t i = 0; i < w.size(); ++i) py[i] = static_cast<T>(w[i]);
    });
  }

 private:
  DType dtype_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "MelWeightMatrix", kernel_factory<MelWeightMatrixKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
