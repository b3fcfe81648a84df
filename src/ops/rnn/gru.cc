// ONNX GRU (gate order z, r, h) and its backward op ai.onnxtrain::GRUGrad.
//
//   z = f(x Wz^T + h Rz^T + bz)      r = f(x Wr^T + h Rr^T + br)
//   linear_before_reset=0: n = g(x Wh^T + (r * h) Rh^T + Wbh + Rbh)
//   linear_before_reset=1: n = g(x Wh^T + Wbh + r * (h Rh^T + Rbh))      (PyTorch's form)
//   h' = (1 - z) * n + z * h
// with `clip` clamping every pre-activation. The input projection of all steps is one GEMM; the
// recurrence is one [batch x 3H] GEMM per step (linear_before_reset=1) or a [batch x 2H] and a
// [batch x H] one (=0, where the reset gate multiplies the state before its product).
//
// GRUGrad inputs: X, W, R, B, sequence_lens, initial_h, Y, dY, dY_h (optional ones may be empty;
// without Y it reruns the forward); outputs dX, dW, dR, dB, dinitial_h. Given every state
// (Y), nothing of the recomputation is sequential: all pre-activations come from big GEMMs.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/rnn/rnn_common.h"

namespace onnxtrain {
namespace {

using namespace rnn;

const std::vector<Activation> kGruDefaults{Activation::Sigmoid, Activation::Tanh};

// Biases folded into the input projection: Wb + Rb for z and r, Wbh (+ Rbh when the reset
// gate comes first); rbh receives Rbh when it must stay inside the reset product.
template <typename T>
void gru_biases(const Args<T>& a, int d, T* bias, T* rbh) {
  const int64_t H = a.dims.H, G = 3 * H;
  const bool lbr = a.spec->linear_before_reset;
  if (!a.b) {
    std::fill_n(bias, G, T(0));
    std::fill_n(rbh, H, T(0));
    return;
  }
  const T* wb = a.b + d * 2 * G;
  const T* rb = wb + G;
  for (int64_t j = 0; j < G; ++j) bias[j] = wb[j] + (j < 2 * H || !lbr ? rb[j] : T(0));
  for (int64_t j = 0; j < H; ++j) rbh[j] = lbr ? rb[2 * H + j] : T(0);
}

template <typename T>
struct ForwardScratch {
  T *gx = nullptr, *gh = nullptr, *h = nullptr, *u = nullptr, *bias = nullptr, *rbh = nullptr;
  void carve(Carver& cv, const Dims& d) {
    gx = cv.take<T>(d.rows() * 3 * d.H);
    gh = cv.take<T>(d.B * 3 * d.H);
    h = cv.take<T>(d.B * d.H);
    u = cv.take<T>(d.B * d.H);
    carve_biases(cv, d);
  }
  void carve_biases(Carver& cv, const Dims& d) {
    bias = cv.take<T>(3 * d.H);
    rbh = cv.take<T>(d.H);
  }
};

// z and r from their summed pre-activations, in place (g holds [z, r] pre-activations).
template <typename T>
inline void update_reset_gates(const Spec& spec, int d, int64_t H, T* g, uint8_t* mask) {
  if (spec.has_clip) clip_span(g, 2 * H, spec.clip, mask);
  activate(spec.act(d, 0), g, 2 * H);
}

template <typename T>
inline void candidate(const Spec& spec, int d, int64_t H, T* n, uint8_t* mask) {
  if (spec.has_clip) clip_span(n, H, spec.clip, mask);
  activate(spec.act(d, 1), n, H);
}

struct GruCell : PlainCell<3, kGruDefaults, ForwardScratch> {
  template <typename T>
  static void forward(ThreadPool& pool, const Args<T>& a, ForwardScratch<T>& s, T* y, T* yh);
};

template <typename T>
void GruCell::forward(ThreadPool& pool, const Args<T>& a, ForwardScratch<T>& s, T* y, T* yh) {
  const Dims& D = a.dims;
  const int64_t H = D.H, G = 3 * H, B = D.B;
  const bool lbr = a.spec->linear_before_reset;
  const int64_t steps = a.max_len();
  for (int d = 0; d < D.D; ++d) {
    const bool rev = a.spec->is_reverse(d);
    const T* R = a.r + d * G * H;
    gru_biases(a, d, s.bias, s.rbh);
    project_inputs(pool, D, a.x, a.w + d * G * D.I, G, s.bias, s.gx);
    load_states(D, d, a.h0, s.h);
    for (int64_t step = 0; step < steps; ++step) {
      auto row_of = [&](int64_t b) {
        const int64_t len = a.lens[static_cast<size_t>(b)];
        return step < len ? D.x_row(time_at(rev, step, len), b) : int64_t(-1);
      };
      // gh = h R^T: all three blocks, or z and r only when r multiplies h first.
      matmul<T>(pool, false, true, B, lbr ? G : 2 * H, H, s.h, H, R, H, T(0), s.gh, G);
      if (!lbr) {
        pool.parallel_for(B, row_grain(G), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t row = row_of(b);
            T* g = s.gh + b * G;
            T* u = s.u + b * H;
            if (row < 0) {
              std::fill_n(u, H, T(0));
              continue;
            }
            const T* xg = s.gx + row * G;
            for (int64_t j = 0; j < 2 * H; ++j) g[j] += xg[j];
            update_reset_gates(*a.spec, d, H, g, static_cast<uint8_t*>(nullptr));
            const T* h = s.h + b * H;
            for (int64_t j = 0; j < H; ++j) u[j] = g[H + j] * h[j];
          }
        });
        matmul<T>(pool, false, true, B, H, H, s.u, H, R + 2 * H * H, H, T(0), s.gh + 2 * H, G);
      }
      pool.parallel_for(B, row_grain(G), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t row = row_of(b);
          if (row < 0) continue;
          T* g = s.gh + b * G;
          const T* xg = s.gx + row * G;
          T* n = g + 2 * H;
          if (lbr) {
            for (int64_t j = 0; j < 2 * H; ++j) g[j] += xg[j];
            update_reset_gates(*a.spec, d, H, g, static_cast<uint8_t*>(nullptr));
            for (int64_t j = 0; j < H; ++j) n[j] = xg[2 * H + j] + g[H + j] * (n[j] + s.rbh[j]);
          } else {
            for (int64_t j = 0; j < H; ++j) n[j] += xg[2 * H + j];
          }
          candidate(*a.spec, d, H, n, static_cast<uint8_t*>(nullptr));
          T* h = s.h + b * H;
          for (int64_t j = 0; j < H; ++j) h[j] = (T(1) - g[j]) * n[j] + g[j] * h[j];
          if (y) std::copy_n(h, H, y + D.y_offset(time_at(rev, step, a.lens[static_cast<size_t>(b)]), d, b));
        }
      });
    }
    store_states(D, d, s.h, yh);
    zero_padding(D, a.lens, d, y);
  }
}

class GruGradKernel final : public PlainGradKernel<GruGradKernel, GruCell> {
 public:
  using PlainGradKernel::PlainGradKernel;

  template <typename T>
  void run(KernelContext& ctx) const {
    Args<T> a = make_args<T>(ctx, spec_, false);
    const Dims& D = a.dims;
    const int64_t H = D.H, G = 3 * H, B = D.B, rows = D.rows(), I = D.I;
    const bool lbr = spec_.linear_before_reset;
    const OutputGradients<T> og = output_gradients<T>(ctx, spec_, D, kPlainGradY);

    ForwardScratch<T> fs;
    T *hp, *act, *gr, *sl, *aux, *dhr, *dgs, *du, *dh, *zeros;
    uint8_t* mask;
    const T* y = forward_output_for_backward<GruCell>(ctx, a, og.y, fs, [&](Carver& cv) {
      hp = cv.take<T>(rows * H);
      act = cv.take<T>(rows * G);
      gr = cv.take<T>(rows * G);
      sl = cv.take<T>(rows * G);
      aux = cv.take<T>(rows * H);
      dhr = lbr ? cv.take<T>(rows * H) : nullptr;
      dgs = cv.take<T>(B * G);
      du = cv.take<T>(B * H);
      dh = cv.take<T>(B * H);
      zeros = cv.take<T>(H);
      mask = spec_.has_clip ? cv.take<uint8_t>(rows * G) : nullptr;
    });
    ThreadPool& pool = ctx.threads();
    std::fill_n(zeros, H, T(0));

    const InputGradients<T> ig = input_gradients<T>(ctx, D, G);
    const int64_t steps = a.max_len();

    for (int d = 0; d < D.D; ++d) {
      const bool rev = spec_.is_reverse(d);
      const T* W = a.w + d * G * I;
      const T* R = a.r + d * G * H;
      const T* Rh = R + 2 * H * H;

      // Recompute every step's gates from the stacked previous states.
      previous_states(D, a.lens, d, rev, y, a.h0, hp);
      gru_biases(a, d, fs.bias, fs.rbh);
      project_inputs(pool, D, a.x, W, G, fs.bias, act);
      matmul<T>(pool, false, true, rows, lbr ? G : 2 * H, H, hp, H, R, H, T(0), gr, G);
      // z, r (and Q = h Rh^T + Rbh, or U = r * h) for every row.
      pool.parallel_for(rows, row_grain(G), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          T* g = act + row * G;
          const T* q = gr + row * G;
          for (int64_t j = 0; j < 2 * H; ++j) g[j] += q[j];
          update_reset_gates(spec_, d, H, g, mask ? mask + row * G : nullptr);
          T* x = aux + row * H;
          const T* h = hp + row * H;
          if (lbr)
            for (int64_t j = 0; j < H; ++j) x[j] = q[2 * H + j] + fs.rbh[j];
          else
            for (int64_t j = 0; j < H; ++j) x[j] = g[H + j] * h[j];
        }
      });
      if (!lbr) matmul<T>(pool, false, true, rows, H, H, aux, H, Rh, H, T(0), gr + 2 * H, G);
      pool.parallel_for(rows, row_grain(G), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          T* g = act + row * G;
          T* n = g + 2 * H;
          if (lbr)
            for (int64_t j = 0; j < H; ++j) n[j] += g[H + j] * aux[row * H + j];
          else
            for (int64_t j = 0; j < H; ++j) n[j] += gr[row * G + 2 * H + j];
          uint8_t* m = mask ? mask + row * G : nullptr;
          candidate(spec_, d, H, n, m ? m + 2 * H : nullptr);
          T* s = sl + row * G;
          slopes(spec_.act(d, 0), g, s, 2 * H);
          slopes(spec_.act(d, 1), n, s + 2 * H, H);
          if (m) apply_clip_mask(s, m, G);
        }
      });

      // Backward sweep; dG (pre-activation gradients, W's view) replaces the slopes in sl.
      load_states(D, d, og.dyh, dh);
      for (int64_t step = steps - 1; step >= 0; --step) {
        auto row_of = [&](int64_t b) {
          const int64_t len = a.lens[static_cast<size_t>(b)];
          return step < len ? D.x_row(time_at(rev, step, len), b) : int64_t(-1);
        };
        backward_rows(pool, D, a.lens, rev, step, G, dgs, [&](int64_t b, int64_t t, int64_t row, T* dg) {
          const T* g = act + row * G;
          const T *z = g, *r = g + H, *n = g + 2 * H;
          T* s = sl + row * G;
          const T *sz = s, *sr = s + H, *sn = s + 2 * H;
          const T* h = hp + row * H;
          const T* dyr = og.dy ? og.dy + D.y_offset(t, d, b) : zeros;
          T* dhb = dh + b * H;
          const T* q = aux + row * H;
          for (int64_t j = 0; j < H; ++j) {
            const T dhj = dhb[j] + dyr[j];
            const T dz = dhj * (h[j] - n[j]) * sz[j];
            const T dn = dhj * (T(1) - z[j]) * sn[j];
            dg[j] = dz;
            dg[2 * H + j] = dn;
            dhb[j] = dhj * z[j];  // the direct path; the products with R are added below
            if (lbr) {
              dg[H + j] = dn * q[j] * sr[j];
            }
          }
          if (lbr) {
            std::copy_n(dg, G, s);
            T* dnr = dhr + row * H;
            for (int64_t j = 0; j < H; ++j) dnr[j] = dg[2 * H + j] * r[j];
            std::copy_n(dnr, H, dg + 2 * H);  // R's view of the candidate's gradient
          }
        });
        if (lbr) {
          matmul<T>(pool, false, false, B, H, G, dgs, G, R, H, T(1), dh, H);
          continue;
        }
        // du = dn Rh, then dr = du * h and dh += du * r + [dz, dr] R_zr.
        matmul<T>(pool, false, false, B, H, H, dgs + 2 * H, G, Rh, H, T(0), du, H);
        pool.parallel_for(B, row_grain(G), [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t row = row_of(b);
            if (row < 0) continue;
            T* dg = dgs + b * G;
            const T* r = act + row * G + H;
            const T* sr = sl + row * G + H;
            const T* h = hp + row * H;
            const T* dub = du + b * H;
            T* dhb = dh + b * H;
            for (int64_t j = 0; j < H; ++j) {
              dg[H + j] = dub[j] * h[j] * sr[j];
              dhb[j] += dub[j] * r[j];
            }
            std::copy_n(dg, G, sl + row * G);
          }
        });
        matmul<T>(pool, false, false, B, H, 2 * H, dgs, G, R, H, T(1), dh, H);
      }

      T* dG = sl;
      zero_padded_rows(D, a.lens, G, dG);
      if (lbr) zero_padded_rows(D, a.lens, H, dhr);
      // The candidate's gradient as R sees it: dn * r (reset after the product) or dn with U.
      const T* dn_r = lbr ? dhr : dG + 2 * H;
      const int64_t ld_dn_r = lbr ? H : G;
      const T* rh_input = lbr ? hp : aux;
      input_weight_gradients(pool, a, d, G, dG, W, ig);
      if (ig.dr) {
        matmul<T>(pool, true, false, 2 * H, H, rows, dG, G, hp, H, T(0), ig.dr + d * G * H, H);
        matmul<T>(pool, true, false, H, H, rows, dn_r, ld_dn_r, rh_input, H, T(0), ig.dr + d * G * H + 2 * H * H, H);
      }
      if (ig.db) {
        T* dbd = ig.db + d * 2 * G;
        std::fill_n(dbd, 2 * G, T(0));
        column_sums(dG, rows, G, G, dbd);
        std::copy_n(dbd, 2 * H, dbd + G);
        column_sums(dn_r, rows, H, ld_dn_r, dbd + G + 2 * H);
      }
      store_states(D, d, dh, ig.dh0);
    }
  }
};

}  // namespace

ONNXTRAIN_KERNEL("", "GRU", kernel_factory<ForwardKernel<GruCell>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GRUGrad", kernel_factory<GruGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "GRU", emit_plain_rnn_gradient);
// ONNX marks the initial states non-differentiable; PyTorch differentiates h0 (and c0).
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "GRU", rnn::kInitialH);

}  // namespace onnxtrain
