// ONNX LSTM (gate order i, o, f, c; optional peepholes P = [Pi, Po, Pf]) and its backward op
// ai.onnxtrain::LSTMGrad.
//
//   i = f(x Wi^T + h Ri^T + Pi * c_prev + bi)      f = f(x Wf^T + h Rf^T + Pf * c_prev + bf)
//   g = g(x Wc^T + h Rc^T + bc)                     c = f * c_prev + i * g
//   o = f(x Wo^T + h Ro^T + Po * c + bo)            h = o * h(c)
// with `clip` clamping every pre-activation. The input projection of all steps is one GEMM, the
// recurrence one [batch x 4H] GEMM per step.
//
// LSTMGrad inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P, Y, dY, dY_h, dY_c (any of
// the optional ones empty; without Y it reruns the forward); outputs dX, dW, dR, dB, dinitial_h,
// dinitial_c, dP. From Y (every hidden state) it recomputes the pre-activations of all steps
// with two big GEMMs and the cell states with an elementwise sweep, runs the backward sweep
// through time (one [batch x H] GEMM per step) and forms dX, dW, dR with three big GEMMs.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/rnn/rnn_common.h"

namespace onnxtrain {
namespace {

using namespace rnn;

const std::vector<Activation> kLstmDefaults{Activation::Sigmoid, Activation::Tanh, Activation::Tanh};
// ai.onnxtrain::LSTMTraining's outputs after Y, Y_h, Y_c: what its backward would recompute.
enum StashOutput { kGatesOut = 3, kCellsOut = 4 };

template <typename T>
using LstmArgs = Args<T>;

template <typename T>
struct ForwardScratch {
  T *gx = nullptr, *gh = nullptr, *h = nullptr, *c = nullptr, *bias = nullptr;
  uint8_t* mask = nullptr;
  void carve(Carver& cv, const Dims& d) {
    gx = cv.take<T>(d.rows() * 4 * d.H);
    gh = cv.take<T>(d.B * 4 * d.H);
    h = cv.take<T>(d.B * d.H);
    c = cv.take<T>(d.B * d.H);
    carve_biases(cv, d);
  }
  void carve_biases(Carver& cv, const Dims& d) { bias = cv.take<T>(4 * d.H); }
};

// x W^T + Wb + Rb for every row, into gx [rows, 4H].
template <typename T>
void input_projection(ThreadPool& pool, const LstmArgs<T>& a, int d, T* gx, T* bias) {
  const int64_t G = 4 * a.dims.H;
  if (a.b)
    for (int64_t j = 0; j < G; ++j) bias[j] = a.b[d * 2 * G + j] + a.b[d * 2 * G + G + j];
  project_inputs(pool, a.dims, a.x, a.w + d * G * a.dims.I, G, a.b ? bias : nullptr, gx);
}

// One cell update of one batch row. `g` holds the summed pre-activations [i, o, f, c] and ends
// holding the activated gates; c is updated in place; h (H values) receives the new state.
// mask (4H) records clipped pre-activations when given.
template <typename T>
inline void cell_step(const Spec& spec, int d, int64_t H, const T* p, T* g, T* c, T* h, uint8_t* mask) {
  T *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
  if (p)
    for (int64_t j = 0; j < H; ++j) {
      gi[j] += p[j] * c[j];
      gf[j] += p[2 * H + j] * c[j];
    }
  if (spec.has_clip) {
    clip_span(gi, H, spec.clip, mask ? mask : nullptr);
    clip_span(gf, 2 * H, spec.clip, mask ? mask + 2 * H : nullptr);
  }
  activate(spec.act(d, 0), gi, H);
  activate(spec.act(d, 0), gf, H);
  activate(spec.act(d, 1), gc, H);
  for (int64_t j = 0; j < H; ++j) c[j] = gf[j] * c[j] + gi[j] * gc[j];
  if (p)
    for (int64_t j = 0; j < H; ++j) go[j] += p[H + j] * c[j];
  if (spec.has_clip) clip_span(go, H, spec.clip, mask ? mask + H : nullptr);
  activate(spec.act(d, 0), go, H);
  std::copy(c, c + H, h);
  activate(spec.act(d, 2), h, H);
  for (int64_t j = 0; j < H; ++j) h[j] *= go[j];
}

// The forward of every direction. y (may be null) receives Y; yh, yc (may be null) the final
// states.
// gates / cells (may be null): the stash of ai.onnxtrain::LSTMTraining, [D, rows, 4H] activated
// gates and [D, rows, H] cell states, at each step's row of X.
template <typename T>
void lstm_forward(ThreadPool& pool, const LstmArgs<T>& a, ForwardScratch<T>& s, T* y, T* yh, T* yc,
                  T* gates = nullptr, T* cells = nullptr) {
  const Dims& D = a.dims;
  const int64_t H = D.H, G = 4 * H;
  const int64_t steps = a.max_len();
  for (int d = 0; d < D.D; ++d) {
    const bool rev = a.spec->is_reverse(d);
    const T* R = a.r + d * G * H;
    const T* p = a.p ? a.p + d * 3 * H : nullptr;
    input_projection(pool, a, d, s.gx, s.bias);
    load_states(D, d, a.h0, s.h);
    load_states(D, d, a.c0, s.c);
    for (int64_t step = 0; step < steps; ++step)
      recurrent_step(pool, D, a.lens, rev, step, G, s.h, R, s.gx, s.gh, [&](int64_t b, int64_t t, T* g) {
        T* hb = s.h + b * H;
        cell_step(*a.spec, d, H, p, g, s.c + b * H, hb, static_cast<uint8_t*>(nullptr));
        if (y) std::copy(hb, hb + H, y + D.y_offset(t, d, b));
        const int64_t row = D.x_row(t, b);
        if (gates) std::copy(g, g + G, gates + (d * D.rows() + row) * G);
        if (cells) std::copy(s.c + b * H, s.c + b * H + H, cells + (d * D.rows() + row) * H);
      });
    store_states(D, d, s.h, yh);
    store_states(D, d, s.c, yc);
    zero_padding(D, a.lens, d, y);
  }
}

class LstmKernel final : public RecurrentKernel<LstmKernel> {
 public:
  explicit LstmKernel(const KernelInfo& info) : RecurrentKernel(info, 4, kLstmDefaults) {}

  template <typename T>
  void run(KernelContext& ctx) const {
    LstmArgs<T> a = make_args<T>(ctx, spec_, true);
    T* y = needed_output<T>(ctx, 0, a.dims.y_shape());
    T* yh = needed_output<T>(ctx, 1, a.dims.state_shape());
    T* yc = needed_output<T>(ctx, 2, a.dims.state_shape());
    T* gates = needed_output<T>(ctx, kGatesOut, {a.dims.D, a.dims.rows(), 4 * a.dims.H});
    T* cells = needed_output<T>(ctx, kCellsOut, {a.dims.D, a.dims.rows(), a.dims.H});
    OT_CHECK(!(gates || cells) || !spec_.has_clip, spec_.node, ": LSTMTraining's stash does not hold clip masks");
    // Rows past a sequence's length keep no gates: the backward reads only rows it ran.
    if (gates) std::fill_n(gates, a.dims.D * a.dims.rows() * 4 * a.dims.H, T(0));
    if (cells) std::fill_n(cells, a.dims.D * a.dims.rows() * a.dims.H, T(0));
    ForwardScratch<T> s;
    carve_scratch(ctx, [&](Carver& cv) { s.carve(cv, a.dims); });
    lstm_forward(ctx.threads(), a, s, y, yh, yc, gates, cells);
  }
};

enum GradInput { kY = 8, kdY = 9, kdYh = 10, kdYc = 11, kGatesIn = 12, kCellsIn = 13 };

class LstmGradKernel final : public RecurrentKernel<LstmGradKernel> {
 public:
  explicit LstmGradKernel(const KernelInfo& info) : RecurrentKernel(info, 4, kLstmDefaults) {}

  template <typename T>
  void run(KernelContext& ctx) const {
    LstmArgs<T> a = make_args<T>(ctx, spec_, true);
    const Dims& D = a.dims;
    const int64_t H = D.H, G = 4 * H, B = D.B, rows = D.rows(), I = D.I;
    const OutputGradients<T> og = output_gradients<T>(ctx, spec_, D, kY);
    const T* dyc = optional_input<T>(ctx, spec_, kdYc, D.state_shape(), "dY_c");
    const T* stashed_gates = optional_input<T>(ctx, spec_, kGatesIn, {D.D, rows, G}, "the stashed gates");
    const T* stashed_cells = optional_input<T>(ctx, spec_, kCellsIn, {D.D, rows, H}, "the stashed cell states");
    const bool stashed = stashed_gates && stashed_cells && og.y;

    ForwardScratch<T> fs;
    T *y_own, *hp, *act, *sl, *cs, *tc, *stc, *dgs, *dh, *dc, *dp, *zeros;
    uint8_t* mask;
    carve_scratch(ctx, [&](Carver& cv) {
      y_own = carve_forward_scratch<T>(cv, D, og.y != nullptr, fs);
      hp = cv.take<T>(rows * H);
      // With the stash, gates and cell states are read where the forward left them.
      act = stashed ? nullptr : cv.take<T>(rows * G);
      sl = cv.take<T>(rows * G);
      cs = stashed ? nullptr : cv.take<T>(rows * H);
      tc = cv.take<T>(rows * H);
      stc = cv.take<T>(rows * H);
      dgs = cv.take<T>(B * G);
      dh = cv.take<T>(B * H);
      dc = cv.take<T>(B * H);
      dp = cv.take<T>(B * 3 * H);
      zeros = cv.take<T>(std::max<int64_t>(3 * H, G));
      mask = spec_.has_clip ? cv.take<uint8_t>(B * G) : nullptr;
    });
    ThreadPool& pool = ctx.threads();
    if (!og.y) lstm_forward(pool, a, fs, y_own, static_cast<T*>(nullptr), static_cast<T*>(nullptr));
    const T* y = og.y ? og.y : y_own;
    std::fill_n(zeros, std::max<int64_t>(3 * H, G), T(0));

    const InputGradients<T> ig = input_gradients<T>(ctx, D, G);
    T* dc0 = needed_output<T>(ctx, 5, D.state_shape());
    T* dpo = needed_output<T>(ctx, 6, {D.D, 3 * H});
    const int64_t steps = a.max_len();

    for (int d = 0; d < D.D; ++d) {
      const bool rev = spec_.is_reverse(d);
      const T* W = a.w + d * G * I;
      const T* R = a.r + d * G * H;
      const T* P = a.p ? a.p + d * 3 * H : zeros;
      const T* c0 = a.c0;

      // Pre-activations of every step: x W^T + b + h_prev R^T (unless the forward stashed the
      // activated gates and cell states).
      previous_states(D, a.lens, d, rev, y, a.h0, hp);
      if (!stashed) {
        input_projection(pool, a, d, act, fs.bias);
        matmul<T>(pool, false, true, rows, G, H, hp, H, R, H, T(1), act, G);
      }
      const T* gates = stashed ? stashed_gates + d * rows * G : act;
      const T* cells = stashed ? stashed_cells + d * rows * H : cs;

      // Forward sweep per batch row: cell states, activated gates and their slopes.
      pool.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t len = a.lens[static_cast<size_t>(b)];
          for (int64_t t = len; t < D.T; ++t) std::fill_n(sl + D.x_row(t, b) * G, G, T(0));
          std::vector<T> c(static_cast<size_t>(H), T(0));
          if (c0) std::copy(c0 + D.state_offset(d, b), c0 + D.state_offset(d, b) + H, c.begin());
          uint8_t* m = mask ? mask + b * G : nullptr;
          for (int64_t step = 0; step < len; ++step) {
            const int64_t row = D.x_row(time_at(rev, step, len), b);
            if (!stashed) {
              cell_step(spec_, d, H, a.p ? P : nullptr, act + row * G, c.data(), tc + row * H, m);
              std::copy(c.begin(), c.end(), cs + row * H);
            }
            const T* g = gates + row * G;
            // tc held h = o * h(c); the backward wants h(c) itself and its slope.
            std::copy(cells + row * H, cells + row * H + H, tc + row * H);
            activate(spec_.act(d, 2), tc + row * H, H);
            slopes(spec_.act(d, 2), tc + row * H, stc + row * H, H);
            T* s = sl + row * G;
            slopes(spec_.act(d, 0), g, s, 3 * H);  // i, o, f
            slopes(spec_.act(d, 1), g + 3 * H, s + 3 * H, H);
            if (m) apply_clip_mask(s, m, G);
          }
        }
      });

      // Backward sweep through time; dG (pre-activation gradients) replaces the slopes in sl.
      load_states(D, d, og.dyh, dh);
      load_states(D, d, dyc, dc);
      std::fill_n(dp, B * 3 * H, T(0));
      for (int64_t step = steps - 1; step >= 0; --step) {
        backward_rows(pool, D, a.lens, rev, step, G, dgs, [&](int64_t b, int64_t t, int64_t row, T* dg) {
          const T* gate = gates + row * G;
          const T *gi = gate, *go = gate + H, *gf = gate + 2 * H, *gc = gate + 3 * H;
          T* s = sl + row * G;
          const T *si = s, *so = s + H, *sf = s + 2 * H, *sc = s + 3 * H;
          const T* c = cells + row * H;
          const T* hc = tc + row * H;
          const T* shc = stc + row * H;
          const T* cprev = step == 0 ? (c0 ? c0 + D.state_offset(d, b) : zeros)
                                     : cells + D.x_row(time_at(rev, step - 1, a.lens[static_cast<size_t>(b)]), b) * H;
          const T* dyr = og.dy ? og.dy + D.y_offset(t, d, b) : zeros;
          T* dhb = dh + b * H;
          T* dcb = dc + b * H;
          T* dpb = dp + b * 3 * H;
          const T *pi = P, *po = P + H, *pf = P + 2 * H;
          for (int64_t j = 0; j < H; ++j) {
            const T dhj = dhb[j] + dyr[j];
            const T dO = dhj * hc[j] * so[j];
            const T dcj = dcb[j] + dhj * go[j] * shc[j] + dO * po[j];
            const T dI = dcj * gc[j] * si[j];
            const T dF = dcj * cprev[j] * sf[j];
            const T dC = dcj * gi[j] * sc[j];
            dcb[j] = dcj * gf[j] + dI * pi[j] + dF * pf[j];
            dg[j] = dI;
            dg[H + j] = dO;
            dg[2 * H + j] = dF;
            dg[3 * H + j] = dC;
            dpb[j] += dI * cprev[j];
            dpb[H + j] += dO * c[j];
            dpb[2 * H + j] += dF * cprev[j];
            dhb[j] = T(0);  // replaced by dG R below
          }
          std::copy(dg, dg + G, s);
        });
        // Rows past their length have zero dG and keep their carried dh.
        matmul<T>(pool, false, false, B, H, G, dgs, G, R, H, T(1), dh, H);
      }

      const T* dG = sl;
      input_weight_gradients(pool, a, d, G, dG, W, ig);
      recurrent_weight_gradients(pool, D, d, G, dG, hp, ig);
      if (dpo) {
        T* dpd = dpo + d * 3 * H;
        std::fill_n(dpd, 3 * H, T(0));
        column_sums(dp, B, 3 * H, 3 * H, dpd);
      }
      store_states(D, d, dh, ig.dh0);
      store_states(D, d, dc, dc0);
    }
  }
};

void lstm_gradient(GradBuilder& g) { emit_rnn_gradient(g, "LSTMGrad", 8, 3); }

// The training form hands its stash to the backward op.
void lstm_training_gradient(GradBuilder& g) {
  if (g.num_outputs() <= kCellsOut) return lstm_gradient(g);
  OT_CHECK(!g.has_output_grad(kGatesOut) && !g.has_output_grad(kCellsOut), g.node().describe(),
           ": its stash outputs are the backward's, not values to differentiate");
  emit_rnn_gradient(g, "LSTMGrad", 8, 3, {g.output(kGatesOut), g.output(kCellsOut)});
}

}  // namespace

ONNXTRAIN_KERNEL("", "LSTM", kernel_factory<LstmKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "LSTMGrad", kernel_factory<LstmGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "LSTM", lstm_gradient);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "LSTMTraining", kernel_factory<LstmKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "LSTMTraining", lstm_training_gradient);
// ONNX marks the initial states non-differentiable; PyTorch differentiates h0 (and c0).
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "LSTM", rnn::kInitialH);
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "LSTM", rnn::kInitialC);

}  // namespace onnxtrain
