// ONNX RNN, h' = f(x Wi^T + h Ri^T + Wbi + Rbi) (f defaults to Tanh), and its backward op
// ai.onnxtrain::RNNGrad: inputs X, W, R, B, sequence_lens, initial_h, Y, dY, dY_h (optional ones
// may be empty; without Y it reruns the forward); outputs dX, dW, dR, dB, dinitial_h.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/rnn/rnn_common.h"

namespace onnxtrain {
namespace {

using namespace rnn;

const std::vector<Activation> kRnnDefaults{Activation::Tanh};

template <typename T>
void rnn_bias(const Args<T>& a, int d, T* bias) {
  const int64_t H = a.dims.H;
  for (int64_t j = 0; j < H; ++j) bias[j] = a.b ? a.b[d * 2 * H + j] + a.b[d * 2 * H + H + j] : T(0);
}

template <typename T>
struct ForwardScratch {
  T *gx = nullptr, *gh = nullptr, *h = nullptr, *bias = nullptr;
  void carve(Carver& cv, const Dims& d) {
    gx = cv.take<T>(d.rows() * d.H);
    gh = cv.take<T>(d.B * d.H);
    h = cv.take<T>(d.B * d.H);
    carve_biases(cv, d);
  }
  void carve_biases(Carver& cv, const Dims& d) { bias = cv.take<T>(d.H); }
};

struct RnnCell : PlainCell<1, kRnnDefaults, ForwardScratch> {
  template <typename T>
  static void forward(ThreadPool& pool, const Args<T>& a, ForwardScratch<T>& s, T* y, T* yh);
};

template <typename T>
void RnnCell::forward(ThreadPool& pool, const Args<T>& a, ForwardScratch<T>& s, T* y, T* yh) {
  const Dims& D = a.dims;
  const int64_t H = D.H;
  const int64_t steps = a.max_len();
  for (int d = 0; d < D.D; ++d) {
    const bool rev = a.spec->is_reverse(d);
    const T* R = a.r + d * H * H;
    rnn_bias(a, d, s.bias);
    project_inputs(pool, D, a.x, a.w + d * H * D.I, H, s.bias, s.gx);
    load_states(D, d, a.h0, s.h);
    for (int64_t step = 0; step < steps; ++step)
      recurrent_step(pool, D, a.lens, rev, step, H, s.h, R, s.gx, s.gh, [&](int64_t b, int64_t t, T* g) {
        if (a.spec->has_clip) clip_span(g, H, a.spec->clip, static_cast<uint8_t*>(nullptr));
        activate(a.spec->act(d, 0), g, H);
        std::copy_n(g, H, s.h + b * H);
        if (y) std::copy_n(g, H, y + D.y_offset(t, d, b));
      });
    store_states(D, d, s.h, yh);
    zero_padding(D, a.lens, d, y);
  }
}

class RnnGradKernel final : public PlainGradKernel<RnnGradKernel, RnnCell> {
 public:
  using PlainGradKernel::PlainGradKernel;

  template <typename T>
  void run(KernelContext& ctx) const {
    Args<T> a = make_args<T>(ctx, spec_, false);
    const Dims& D = a.dims;
    const int64_t H = D.H, B = D.B, rows = D.rows(), I = D.I;
    const OutputGradients<T> og = output_gradients<T>(ctx, spec_, D, kPlainGradY);
    const InputGradients<T> ig = input_gradients<T>(ctx, D, H);
    const int64_t steps = a.max_len();

    ForwardScratch<T> fs;
    T *hp, *pre, *dgs, *dh, *zeros;
    uint8_t* mask;
    const T* y = forward_output_for_backward<RnnCell>(ctx, a, og.y, fs, [&](Carver& cv) {
      hp = cv.take<T>(rows * H);
      pre = cv.take<T>(rows * H);
      dgs = cv.take<T>(B * H);
      dh = cv.take<T>(B * H);
      zeros = cv.take<T>(H);
      mask = spec_.has_clip ? cv.take<uint8_t>(rows * H) : nullptr;
    });
    ThreadPool& pool = ctx.threads();
    std::fill_n(zeros, H, T(0));


    for (int d = 0; d < D.D; ++d) {
      const bool rev = spec_.is_reverse(d);
      const T* W = a.w + d * H * I;
      const T* R = a.r + d * H * H;
      // Every step's slope f'(pre), from the recomputed outputs; then dG replaces it.
      previous_states(D, a.lens, d, rev, y, a.h0, hp);
      rnn_bias(a, d, fs.bias);
      project_inputs(pool, D, a.x, W, H, fs.bias, pre);
      matmul<T>(pool, false, true, rows, H, H, hp, H, R, H, T(1), pre, H);
      pool.parallel_for(rows, row_grain(H), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          T* g = pre + row * H;
          uint8_t* m = mask ? mask + row * H : nullptr;
          if (m) clip_span(g, H, spec_.clip, m);
          activate(spec_.act(d, 0), g, H);
          slopes(spec_.act(d, 0), g, g, H);
          if (m) apply_clip_mask(g, m, H);
        }
      });
      load_states(D, d, og.dyh, dh);
      for (int64_t step = steps - 1; step >= 0; --step) {
        backward_rows(pool, D, a.lens, rev, step, H, dgs, [&](int64_t b, int64_t t, int64_t row, T* dg) {
          T* s = pre + row * H;
          const T* dyr = og.dy ? og.dy + D.y_offset(t, d, b) : zeros;
          T* dhb = dh + b * H;
          for (int64_t j = 0; j < H; ++j) {
            dg[j] = (dhb[j] + dyr[j]) * s[j];
            dhb[j] = T(0);
          }
          std::copy_n(dg, H, s);
        });
        matmul<T>(pool, false, false, B, H, H, dgs, H, R, H, T(1), dh, H);
      }
      T* dG = pre;
      zero_padded_rows(D, a.lens, H, dG);
      input_weight_gradients(pool, a, d, H, dG, W, ig);
      recurrent_weight_gradients(pool, D, d, H, dG, hp, ig);
      store_states(D, d, dh, ig.dh0);
    }
  }
};

}  // namespace

ONNXTRAIN_KERNEL("", "RNN", kernel_factory<ForwardKernel<RnnCell>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "RNNGrad", kernel_factory<RnnGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "RNN", emit_plain_rnn_gradient);
// ONNX marks the initial states non-differentiable; PyTorch differentiates h0 (and c0).
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "RNN", rnn::kInitialH);

}  // namespace onnxtrain
