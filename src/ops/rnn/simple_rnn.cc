// ONNX RNN, h' = f(x Wi^T + h Ri^T + Wbi + Rbi) (f defaults to Tanh), and its backward op
// ai.onnxtrain::RNNGrad: inputs X, W, R, B, sequence_lens, initial_h, Y, dY, dY_h (optional ones
// may be empty; without Y it reruns the forward); outputs dX, dW, dR, dB, dinitial_h.
#include "autodiff/grad_builder.h"
#include "ops/registry.h"
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
  T *gx, *gh, *h, *bias;
  void carve(Carver& cv, const Dims& d) {
    gx = cv.take<T>(d.rows() * d.H);
    gh = cv.take<T>(d.B * d.H);
    h = cv.take<T>(d.B * d.H);
    bias = cv.take<T>(d.H);
  }
};

template <typename T>
void rnn_forward(ThreadPool& pool, const Args<T>& a, ForwardScratch<T>& s, T* y, T* yh) {
  const Dims& D = a.dims;
  const int64_t H = D.H, B = D.B;
  const int64_t steps = a.max_len();
  for (int d = 0; d < D.D; ++d) {
    const bool rev = a.spec->is_reverse(d);
    const T* R = a.r + d * H * H;
    rnn_bias(a, d, s.bias);
    project_inputs(pool, D, a.x, a.w + d * H * D.I, H, s.bias, s.gx);
    load_states(D, d, a.h0, s.h);
    for (int64_t step = 0; step < steps; ++step) {
      matmul<T>(pool, false, true, B, H, H, s.h, H, R, H, T(0), s.gh, H);
      pool.parallel_for(B, row_grain(H), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t len = a.lens[static_cast<size_t>(b)];
          if (step >= len) continue;
          const int64_t t = time_at(rev, step, len);
          T* g = s.gh + b * H;
          const T* xg = s.gx + D.x_row(t, b) * H;
          for (int64_t j = 0; j < H; ++j) g[j] += xg[j];
          if (a.spec->has_clip) clip_span(g, H, a.spec->clip, static_cast<uint8_t*>(nullptr));
          activate(a.spec->act(d, 0), g, H);
          std::copy_n(g, H, s.h + b * H);
          if (y) std::copy_n(g, H, y + D.y_offset(t, d, b));
        }
      });
    }
    store_states(D, d, s.h, yh);
    zero_padding(D, a.lens, d, y);
  }
}

class RnnKernel final : public RecurrentKernel<RnnKernel> {
 public:
  explicit RnnKernel(const KernelInfo& info) : RecurrentKernel(info, 1, kRnnDefaults) {}

  template <typename T>
  void run(KernelContext& ctx) const {
    run_forward<T, ForwardScratch<T>>(ctx, spec_, [](auto&&... args) { rnn_forward(args...); });
  }
};

// Y, then dY and dY_h (output_gradients reads all three from here).
constexpr int kY = 6;

class RnnGradKernel final : public RecurrentKernel<RnnGradKernel> {
 public:
  explicit RnnGradKernel(const KernelInfo& info) : RecurrentKernel(info, 1, kRnnDefaults) {}

  template <typename T>
  void run(KernelContext& ctx) const {
    Args<T> a = make_args<T>(ctx, spec_, false);
    const Dims& D = a.dims;
    const int64_t H = D.H, B = D.B, rows = D.rows(), I = D.I;
    const OutputGradients<T> og = output_gradients<T>(ctx, spec_, D, kY);

    ForwardScratch<T> fs;
    T *y_own = nullptr, *hp, *pre, *dgs, *dh, *zeros;
    uint8_t* mask;
    carve_scratch(ctx, [&](Carver& cv) {
      if (!og.y) {
        fs.carve(cv, D);
        y_own = cv.take<T>(D.T * D.D * B * H);
      } else {
        fs.gx = fs.gh = fs.h = nullptr;
        fs.bias = cv.take<T>(H);
      }
      hp = cv.take<T>(rows * H);
      pre = cv.take<T>(rows * H);
      dgs = cv.take<T>(B * H);
      dh = cv.take<T>(B * H);
      zeros = cv.take<T>(H);
      mask = spec_.has_clip ? cv.take<uint8_t>(rows * H) : nullptr;
    });
    ThreadPool& pool = ctx.threads();
    if (!og.y) rnn_forward(pool, a, fs, y_own, static_cast<T*>(nullptr));
    const T* y = og.y ? og.y : y_own;
    std::fill_n(zeros, H, T(0));

    const InputGradients<T> ig = input_gradients<T>(ctx, D, H);
    const int64_t steps = a.max_len();

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
        pool.parallel_for(B, row_grain(H), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t len = a.lens[static_cast<size_t>(b)];
            T* dg = dgs + b * H;
            if (step >= len) {
              std::fill_n(dg, H, T(0));
              continue;
            }
            const int64_t t = time_at(rev, step, len);
            T* s = pre + D.x_row(t, b) * H;
            const T* dyr = og.dy ? og.dy + D.y_offset(t, d, b) : zeros;
            T* dhb = dh + b * H;
            for (int64_t j = 0; j < H; ++j) {
              dg[j] = (dhb[j] + dyr[j]) * s[j];
              dhb[j] = T(0);
            }
            std::copy_n(dg, H, s);
          }
        });
        matmul<T>(pool, false, false, B, H, H, dgs, H, R, H, T(1), dh, H);
      }
      T* dG = pre;
      zero_padded_rows(D, a.lens, H, dG);
      if (ig.dx) matmul<T>(pool, false, false, rows, I, H, dG, H, W, I, d == 0 ? T(0) : T(1), ig.dx, I);
      if (ig.dw) matmul<T>(pool, true, false, H, I, rows, dG, H, a.x, I, T(0), ig.dw + d * H * I, I);
      if (ig.dr) matmul<T>(pool, true, false, H, H, rows, dG, H, hp, H, T(0), ig.dr + d * H * H, H);
      if (ig.db) {
        T* dbd = ig.db + d * 2 * H;
        std::fill_n(dbd, H, T(0));
        column_sums(dG, rows, H, H, dbd);
        std::copy_n(dbd, H, dbd + H);
      }
      store_states(D, d, dh, ig.dh0);
    }
  }
};

void rnn_gradient(GradBuilder& g) { emit_rnn_gradient(g, "RNNGrad", 6, 2); }

}  // namespace

ONNXTRAIN_KERNEL("", "RNN", kernel_factory<RnnKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "RNNGrad", kernel_factory<RnnGradKernel>());
ONNXTRAIN_GRADIENT("", "RNN", rnn_gradient);
// ONNX marks the initial states non-differentiable; PyTorch differentiates h0 (and c0).
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "RNN", rnn::kInitialH);

}  // namespace onnxtrain
