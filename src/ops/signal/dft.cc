// DFT and STFT (opset 17). Signals are [batch, dims..., 1] (real) or [batch, dims..., 2]
// (complex: real, imaginary); outputs are complex, [..., 2], in the input's float type.
//   DFT:  X[k] = sum_n x[n] e^(-2 pi i k n / N) along `axis` (inverse: e^(+...) / N); with
//         dft_length the signal is zero-padded or truncated to N first; onesided keeps bins
//         0 .. N/2.
//   STFT: the DFT of each frame x[t * frame_step + n] * window[n], n < frame_length.
// Each transform is a direct O(N^2) sum over a table of the N roots of unity, accumulated in
// double. There are no gradient rules: the gradient builder refuses to differentiate through
// them, by name (see the registrations at the end).
#include <cmath>
#include <complex>
#include <vector>

#include "opdef/op_registry.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

using Complex = std::complex<double>;

// e^(sign 2 pi i j / n) for j < n: a product k*m indexes it modulo n, so no angle is ever
// larger than 2 pi and every bin is as accurate as the first.
std::vector<Complex> roots_of_unity(int64_t n, bool inverse) {
  std::vector<Complex> roots(static_cast<size_t>(n));
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t j = 0; j < n; ++j) {
    const double angle = 2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n);
    roots[static_cast<size_t>(j)] = Complex(std::cos(angle), sign * std::sin(angle));
  }
  return roots;
}

// out[k] for k < bins of the length-n transform of in (n values, zero-padded by the caller).
void transform(const std::vector<Complex>& in, const std::vector<Complex>& roots, int64_t bins, double scale,
               Complex* out) {
  const int64_t n = static_cast<int64_t>(roots.size());
  for (int64_t k = 0; k < bins; ++k) {
    Complex sum = 0;
    int64_t j = 0;  // (k * m) mod n, stepped without overflow
    for (int64_t m = 0; m < n; ++m) {
      sum += in[static_cast<size_t>(m)] * roots[static_cast<size_t>(j)];
      j += k;
      if (j >= n) j -= n;
    }
    out[k] = sum * scale;
  }
}

template <typename T>
Complex sample(const T* p, int64_t i, bool complex_input) {
  return complex_input ? Complex(p[2 * i], p[2 * i + 1]) : Complex(p[i], 0.0);
}

int64_t scalar_length(const Tensor& t, const char* op, const char* what) {
  OT_CHECK(t.numel() == 1 && t.rank() <= 1 && (t.dtype() == DType::Int64 || t.dtype() == DType::Int32), op, ": ", what,
           " must be an int32 or int64 scalar, got ", t.str());
  return t.item_as_int(0);
}

bool complex_signal(const Tensor& x, const char* op) {
  OT_CHECK(x.rank() >= 2 && (x.shape().back() == 1 || x.shape().back() == 2), op, ": the signal ", x.str(),
           " must be [batch, ..., 1] (real) or [batch, ..., 2] (complex)");
  return x.shape().back() == 2;
}

class DftKernel final : public Kernel {
 public:
  explicit DftKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 1)),
        inverse_(info.node.attr_int("inverse", 0) != 0),
        onesided_(info.node.attr_int("onesided", 0) != 0) {
    if (onesided_ && inverse_)
      throw UnsupportedError(str_cat(info.node.describe(), ": an inverse onesided DFT (a complex-to-real transform) "
                                                           "is not supported"));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const bool complex_input = complex_signal(x, "DFT");
    const int signal_rank = x.rank() - 1;  // the trailing 1 or 2 is not a signal dim
    const int64_t axis = axis_ < 0 ? axis_ + signal_rank : axis_;
    OT_CHECK(axis >= 1 && axis < signal_rank, "DFT: axis ", axis_, " must name a signal dim of ", x.str(),
             " (1 to ", signal_rank - 1, ")");
    const int a = static_cast<int>(axis);
    const int64_t length = x.dim(a);
    const int64_t n = ctx.has_input(1) ? scalar_length(ctx.input(1), "DFT", "dft_length") : length;
    OT_CHECK(n >= 1, "DFT: dft_length must be positive, got ", n);
    OT_CHECK(!onesided_ || !complex_input, "DFT: a onesided transform needs a real signal; ", x.str(), " is complex");
    const int64_t bins = onesided_ ? n / 2 + 1 : n;
    TensorShape out_shape = x.shape();
    out_shape[a] = bins;
    out_shape[x.rank() - 1] = 2;
    Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
    const int64_t outer = x.shape().size_between(0, a), inner = x.shape().size_between(a + 1, signal_rank);
    const int64_t channels = complex_input ? 2 : 1;
    const std::vector<Complex> roots = roots_of_unity(n, inverse_);
    const double scale = inverse_ ? 1.0 / static_cast<double>(n) : 1.0;
    dispatch_float(x.dtype(), "DFT", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      ctx.threads().parallel_for(outer * inner, 1, [&](int64_t l0, int64_t l1) {
        std::vector<Complex> line(static_cast<size_t>(n)), spectrum(static_cast<size_t>(bins));
        for (int64_t l = l0; l < l1; ++l) {
          const int64_t o = l / inner, i = l % inner;
          std::fill(line.begin(), line.end(), Complex(0));
          for (int64_t m = 0; m < std::min(n, length); ++m)
            line[static_cast<size_t>(m)] = sample(px + ((o * length + m) * inner + i) * channels, 0, complex_input);
          transform(line, roots, bins, scale, spectrum.data());
          for (int64_t k = 0; k < bins; ++k) {
            T* dst = py + ((o * bins + k) * inner + i) * 2;
            dst[0] = static_cast<T>(spectrum[static_cast<size_t>(k)].real());
            dst[1] = static_cast<T>(spectrum[static_cast<size_t>(k)].imag());
          }
        }
      });
    });
  }

 private:
  int64_t axis_;
  bool inverse_, onesided_;
};

class StftKernel final : public Kernel {
 public:
  explicit StftKernel(const KernelInfo& info) : onesided_(info.node.attr_int("onesided", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const bool complex_input = complex_signal(x, "STFT");
    OT_CHECK(x.rank() == 3, "STFT: the signal ", x.str(), " must be [batch, signal_length, 1 or 2]");
    OT_CHECK(!onesided_ || !complex_input, "STFT: a onesided transform needs a real signal; ", x.str(),
             " is complex (set onesided=0)");
    const int64_t step = scalar_length(ctx.input(1), "STFT", "frame_step");
    OT_CHECK(step >= 1, "STFT: frame_step must be positive, got ", step);
    const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (window)
      OT_CHECK(window->rank() == 1 && window->dtype() == x.dtype(), "STFT: the window ", window->str(),
               " must be 1-D with the signal's element type ", dtype_name(x.dtype()));
    int64_t frame = window ? window->dim(0) : -1;
    if (ctx.has_input(3)) {
      const int64_t given = scalar_length(ctx.input(3), "STFT", "frame_length");
      OT_CHECK(frame < 0 || given == frame, "STFT: frame_length ", given, " differs from the window's length ", frame);
      frame = given;
    }
    OT_CHECK(frame >= 1, "STFT: needs a window or a frame_length of at least 1");
    const int64_t batch = x.dim(0), length = x.dim(1);
    OT_CHECK(frame <= length, "STFT: frame_length ", frame, " is longer than the signal (", length, ")");
    const int64_t frames = 1 + (length - frame) / step;
    const int64_t bins = onesided_ ? frame / 2 + 1 : frame;
    Tensor& y = ctx.allocate_output(0, x.dtype(), {batch, frames, bins, 2});
    const int64_t channels = complex_input ? 2 : 1;
    const std::vector<Complex> roots = roots_of_unity(frame, false);
    dispatch_float(x.dtype(), "STFT", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      const T* pw = window ? window->data<T>() : nullptr;
      T* py = y.data<T>();
      ctx.threads().parallel_for(batch * frames, 1, [&](int64_t f0, int64_t f1) {
        std::vector<Complex> line(static_cast<size_t>(frame)), spectrum(static_cast<size_t>(bins));
        for (int64_t f = f0; f < f1; ++f) {
          const int64_t b = f / frames, t = f % frames;
          const T* start = px + (b * length + t * step) * channels;
          for (int64_t m = 0; m < frame; ++m)
            line[static_cast<size_t>(m)] = sample(start, m, complex_input) * (pw ? static_cast<double>(pw[m]) : 1.0);
          transform(line, roots, bins, 1.0, spectrum.data());
          for (int64_t k = 0; k < bins; ++k) {
            py[(f * bins + k) * 2] = static_cast<T>(spectrum[static_cast<size_t>(k)].real());
            py[(f * bins + k) * 2 + 1] = static_cast<T>(spectrum[static_cast<size_t>(k)].imag());
          }
        }
      });
    });
  }

 private:
  bool onesided_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "DFT", kernel_factory<DftKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "STFT", kernel_factory<StftKernel>(), Recompute::Costly, Rounding::PerValue);
// ONNX 1.12's schemas call the signal (and STFT's window) non-differentiable, which would let a
// gradient request treat the transform as a constant and return zeros. Marked differentiable, a
// request reaches the missing gradient rule and fails naming the op.
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "DFT", 0);
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "STFT", 0);
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "STFT", 2);

}  // namespace onnxtrain
