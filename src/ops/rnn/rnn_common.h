#pragma once
// Shared parts of the recurrent ops (ONNX LSTM, GRU and RNN, opset 7-14 forms) and their
// backward ops: attribute parsing, input validation, the two layouts, sequence lengths, the
// gate activations and the scratch carving.
//
// Conventions of every kernel in this family:
// - Rows of X, of the per-row gate matrices and of the stacked previous states are indexed by
//   Dims::x_row(t, b), i.e. in X's own memory order, so that layout=1 needs no transposes: one
//   big GEMM over all rows handles either layout.
// - A batch entry b of length L is processed at steps s = 0..L-1; its time index is s
//   (forward) or L-1-s (reverse: each sequence is reversed within its own length). Steps past
//   L leave its state untouched, so Y_h/Y_c are the state after its last valid step, and Y is
//   zero at t >= L.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "opdef/kernel.h"
#include "ops/math/fast_math.h"
#include "runtime/blas.h"
#include "runtime/thread_pool.h"

namespace onnxtrain::rnn {

enum class Activation { Sigmoid, Tanh, Relu };

// Input positions shared by the forward ops and their Grad ops.
enum Input { kX = 0, kW = 1, kR = 2, kB = 3, kSequenceLens = 4, kInitialH = 5, kInitialC = 6, kP = 7 };

struct Spec {
  std::string node;  // "LSTM node 'x'", for messages
  int gates = 1;      // 4 (LSTM), 3 (GRU), 1 (RNN)
  int64_t hidden_size = 0;  // 0: not given, taken from R
  int num_directions = 1;
  bool reverse = false;  // direction="reverse"
  int layout = 0;
  bool has_clip = false;
  float clip = 0;
  int acts_per_direction = 1;
  std::vector<Activation> activations;  // acts_per_direction per direction
  bool linear_before_reset = false;     // GRU

  bool is_reverse(int d) const { return reverse || d == 1; }
  Activation act(int d, int k) const { return activations[static_cast<size_t>(d * acts_per_direction + k)]; }
};

// Parses and checks the attributes; `defaults` are the activations of one direction.
Spec parse_spec(const Node& node, int gates, const std::vector<Activation>& defaults);

struct Dims {
  int64_t T = 0, B = 0, I = 0, H = 0;
  int D = 1;
  int layout = 0;

  int64_t x_row(int64_t t, int64_t b) const { return layout == 0 ? t * B + b : b * T + t; }
  int64_t y_offset(int64_t t, int d, int64_t b) const {
    return (layout == 0 ? (t * D + d) * B + b : (b * T + t) * D + d) * H;
  }
  int64_t state_offset(int d, int64_t b) const { return (layout == 0 ? d * B + b : b * D + d) * H; }
  int64_t rows() const { return T * B; }
  TensorShape y_shape() const { return layout == 0 ? TensorShape{T, D, B, H} : TensorShape{B, T, D, H}; }
  TensorShape state_shape() const { return layout == 0 ? TensorShape{D, B, H} : TensorShape{B, D, H}; }
};

// Validates X, W, R, B, sequence_lens, initial_h and (LSTM) initial_c and P against each other
// and the attributes; returns the sizes.
Dims check_inputs(const KernelContext& ctx, const Spec& spec, bool lstm);

// Per batch entry, in [0, T]; T for every entry without the input.
std::vector<int64_t> sequence_lengths(const KernelContext& ctx, const Spec& spec, const Dims& dims);

inline int64_t time_at(bool reverse, int64_t step, int64_t length) { return reverse ? length - 1 - step : step; }

// Refuses element types other than float32 and float64, naming the node.
template <typename F>
void dispatch(DType dtype, const Spec& spec, F&& f) {
  if (dtype == DType::Float32) return f(float{});
  if (dtype == DType::Float64) return f(double{});
  throw UnsupportedError(str_cat(spec.node, ": element type ", dtype_name(dtype), " is not supported (float32 or float64)"));
}

// The six kernels of the family (LSTM, GRU, RNN and their Grad ops): the spec parsed once, and
// compute dispatched to Derived::run<T> for T = float or double.
template <typename Derived>
class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(const KernelInfo& info, int gates, const std::vector<Activation>& defaults)
      : spec_(parse_spec(info.node, gates, defaults)) {}
  void compute(KernelContext& ctx) const override {
    dispatch(ctx.input(kX).dtype(), spec_,
             [&](auto tag) { static_cast<const Derived*>(this)->template run<decltype(tag)>(ctx); });
  }

 protected:
  Spec spec_;
};

// x[i] = act(x[i]) in place.
template <typename T>
void activate(Activation a, T* x, int64_t n);
template <>
void activate<float>(Activation a, float* x, int64_t n);  // the vectorized forms of fast_math.h
template <>
void activate<double>(Activation a, double* x, int64_t n);

// The activation's derivative written in terms of its output y.
template <typename T>
inline T slope(Activation a, T y) {
  switch (a) {
    case Activation::Sigmoid: return y * (T(1) - y);
    case Activation::Tanh: return T(1) - y * y;
    case Activation::Relu: return y > T(0) ? T(1) : T(0);
  }
  return T(0);
}

// out[i] = slope(a, y[i]), with the switch outside the loop so that the loop vectorizes.
template <typename T>
inline void slopes(Activation a, const T* y, T* out, int64_t n) {
  switch (a) {
    case Activation::Sigmoid:
      for (int64_t i = 0; i < n; ++i) out[i] = y[i] * (T(1) - y[i]);
      return;
    case Activation::Tanh:
      for (int64_t i = 0; i < n; ++i) out[i] = T(1) - y[i] * y[i];
      return;
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) out[i] = y[i] > T(0) ? T(1) : T(0);
      return;
  }
}

// Clamps x to [-clip, clip]; mask[i] = 1 where the clamp was active (the gradient stops there).
template <typename T>
inline void clip_span(T* x, int64_t n, float clip, uint8_t* mask) {
  const T c = static_cast<T>(clip);
  for (int64_t i = 0; i < n; ++i) {
    const bool out = x[i] > c || x[i] < -c;
    if (mask) mask[i] = out;
    x[i] = x[i] > c ? c : (x[i] < -c ? -c : x[i]);
  }
}

// Zeros gradient entries whose pre-activation was clipped.
template <typename T>
inline void apply_clip_mask(T* g, const uint8_t* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = mask[i] ? T(0) : g[i];
}

// Two-pass scratch carving: a counting pass (base null) sizes the buffers, then one
// ctx.scratch call (a kernel gets one planned scratch region) backs them all.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<uint8_t*>(base)) {}
  template <typename T>
  T* take(int64_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T) + 63) / 64 * 64;
    return p;
  }
  size_t used() const { return used_; }

 private:
  uint8_t* base_;
  size_t used_ = 0;
};

// Runs `carve(Carver&)` twice: to size, then to hand out memory from ctx.scratch.
template <typename F>
void carve_scratch(KernelContext& ctx, F&& carve) {
  Carver sizing;
  carve(sizing);
  Carver real(ctx.scratch(std::max<size_t>(sizing.used(), 64)));
  carve(real);
}

// Grain for splitting batch rows across threads: enough elementwise work to pay for a chunk.
inline int64_t row_grain(int64_t row_elements) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(row_elements, 1)); }

// C[m x n] (+)= op(A) op(B) on the engine's pool.
template <typename T>
inline void matmul(ThreadPool& pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                   const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc, pool);
}

// out[j] += sum over rows of g[row * ld + j], rows 0..rows-1, n columns.
template <typename T>
void column_sums(const T* g, int64_t rows, int64_t n, int64_t ld, T* out);

// Stacks, per row x_row(t, b), the state each valid step of direction d started from: the
// initial state (or zeros) at the first step, else Y at the previous step in processing order.
// Rows past an entry's length are zero.
template <typename T>
void previous_states(const Dims& dims, const std::vector<int64_t>& lens, int d, bool reverse, const T* y,
                     const T* initial, T* out);

// The tensors of one call, as typed pointers (null for absent optional inputs).
template <typename T>
struct Args {
  const Spec* spec = nullptr;
  Dims dims;
  std::vector<int64_t> lens;
  const T *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  int64_t max_len() const { return lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end()); }
};

template <typename T>
Args<T> make_args(const KernelContext& ctx, const Spec& spec, bool lstm) {
  Args<T> a;
  a.spec = &spec;
  a.dims = check_inputs(ctx, spec, lstm);
  a.lens = sequence_lengths(ctx, spec, a.dims);
  auto ptr = [&](int i) { return i < ctx.num_inputs() && ctx.has_input(i) ? ctx.input(i).template data<T>() : nullptr; };
  a.x = ptr(kX), a.w = ptr(kW), a.r = ptr(kR), a.b = ptr(kB), a.h0 = ptr(kInitialH);
  if (lstm) a.c0 = ptr(kInitialC), a.p = ptr(kP);
  return a;
}

// An optional input of a Grad op (Y or an output gradient), checked against its expected shape.
template <typename T>
const T* optional_input(const KernelContext& ctx, const Spec& spec, int i, const TensorShape& shape, const char* name) {
  if (i >= ctx.num_inputs() || !ctx.has_input(i)) return nullptr;
  const Tensor& t = ctx.input(i);
  const DType dt = ctx.input(kX).dtype();
  OT_CHECK(t.dtype() == dt && t.shape() == shape, spec.node, " gradient: ", name, " must be ", dtype_name(dt),
           shape.str(), ", got ", t.str());
  return t.template data<T>();
}

// Output i when the graph uses it, else null.
template <typename T>
T* needed_output(KernelContext& ctx, int i, const TensorShape& shape) {
  if (i >= ctx.num_outputs() || !ctx.output_needed(i)) return nullptr;
  return ctx.allocate_output(i, ctx.input(kX).dtype(), shape).template data<T>();
}

// What every Grad op reads after the forward's inputs, at positions first, first + 1 and
// first + 2: Y (null: the op reruns the forward) and the gradients of Y and Y_h (null: zeros).
template <typename T>
struct OutputGradients {
  const T* y = nullptr;
  const T* dy = nullptr;
  const T* dyh = nullptr;
};

template <typename T>
OutputGradients<T> output_gradients(const KernelContext& ctx, const Spec& spec, const Dims& D, int first) {
  OutputGradients<T> g;
  g.y = optional_input<T>(ctx, spec, first, D.y_shape(), "Y");
  g.dy = optional_input<T>(ctx, spec, first + 1, D.y_shape(), "dY");
  g.dyh = optional_input<T>(ctx, spec, first + 2, D.state_shape(), "dY_h");
  return g;
}

// Outputs 0-4 of every Grad op, the gradients of X, W, R, B and initial_h, each null when the
// graph does not use it. W and R hold G = gates * H rows per direction.
template <typename T>
struct InputGradients {
  T* dx = nullptr;
  T* dw = nullptr;
  T* dr = nullptr;
  T* db = nullptr;
  T* dh0 = nullptr;
};

template <typename T>
InputGradients<T> input_gradients(KernelContext& ctx, const Dims& D, int64_t G) {
  InputGradients<T> g;
  g.dx = needed_output<T>(ctx, 0, ctx.input(kX).shape());
  g.dw = needed_output<T>(ctx, 1, {D.D, G, D.I});
  g.dr = needed_output<T>(ctx, 2, {D.D, G, D.H});
  g.db = needed_output<T>(ctx, 3, {D.D, 2 * G});
  g.dh0 = needed_output<T>(ctx, 4, D.state_shape());
  return g;
}

// The Grad kernels rerun the forward when the graph kept no Y: then they carve its whole scratch
// and a Y of their own (returned); with Y, only the biases that recomputing the gates reads
// (Scratch::carve_biases).
template <typename T, typename Scratch>
T* carve_forward_scratch(Carver& cv, const Dims& D, bool have_y, Scratch& fs) {
  if (have_y) {
    fs.carve_biases(cv, D);
    return nullptr;
  }
  fs.carve(cv, D);
  return cv.take<T>(D.T * D.D * D.B * D.H);
}

// How a GRU or RNN Grad kernel gets Y: the forward's scratch fs is carved beside the kernel's own
// (carve_own), and Y is recomputed into scratch when the graph kept none (saved_y null).
template <typename Cell, typename T, typename CarveOwn>
const T* forward_output_for_backward(KernelContext& ctx, const Args<T>& a, const T* saved_y,
                                     typename Cell::template Scratch<T>& fs, CarveOwn&& carve_own) {
  T* recomputed = nullptr;
  carve_scratch(ctx, [&](Carver& cv) {
    recomputed = carve_forward_scratch<T>(cv, a.dims, saved_y != nullptr, fs);
    carve_own(cv);
  });
  if (saved_y) return saved_y;
  Cell::forward(ctx.threads(), a, fs, recomputed, static_cast<T*>(nullptr));
  return recomputed;
}

// From direction d's gate gradients dG ([rows, G], W's view): dX (+)= dG W (the first direction
// writes, the second adds) and dW = dG^T X.
template <typename T>
void input_weight_gradients(ThreadPool& pool, const Args<T>& a, int d, int64_t G, const T* dG, const T* W,
                            const InputGradients<T>& ig) {
  const Dims& D = a.dims;
  const int64_t rows = D.rows(), I = D.I;
  if (ig.dx) matmul<T>(pool, false, false, rows, I, G, dG, G, W, I, d == 0 ? T(0) : T(1), ig.dx, I);
  if (ig.dw) matmul<T>(pool, true, false, G, I, rows, dG, G, a.x, I, T(0), ig.dw + d * G * I, I);
}

// Where R reads the previous states hp ([rows, H]) directly (RNN, LSTM): dR = dG^T hp, and both
// bias halves (Wb and Rb) the column sums of dG.
template <typename T>
void recurrent_weight_gradients(ThreadPool& pool, const Dims& D, int d, int64_t G, const T* dG, const T* hp,
                                const InputGradients<T>& ig) {
  const int64_t rows = D.rows(), H = D.H;
  if (ig.dr) matmul<T>(pool, true, false, G, H, rows, dG, G, hp, H, T(0), ig.dr + d * G * H, H);
  if (ig.db) {
    T* dbd = ig.db + d * 2 * G;
    std::fill_n(dbd, G, T(0));
    column_sums(dG, rows, G, G, dbd);
    std::copy_n(dbd, G, dbd + G);
  }
}

// What a GRU or RNN cell declares for ForwardKernel: its gate count, default activations and
// forward scratch. A cell derives from it and adds its forward(pool, args, scratch, y, yh).
template <int Gates, const std::vector<Activation>& Defaults, template <typename> class ForwardScratch>
struct PlainCell {
  static constexpr int kGates = Gates;
  static const std::vector<Activation>& defaults() { return Defaults; }
  template <typename T>
  using Scratch = ForwardScratch<T>;
};

// The Grad kernels of GRU and RNN; Derived::run<T> computes. Their ops read Y at input
// kPlainGradY, then dY and dY_h (output_gradients).
constexpr int kPlainGradY = 6;
template <typename Derived, typename Cell>
class PlainGradKernel : public RecurrentKernel<Derived> {
 public:
  explicit PlainGradKernel(const KernelInfo& info) : RecurrentKernel<Derived>(info, Cell::kGates, Cell::defaults()) {}
};

// The forward kernels of GRU and RNN: outputs Y and Y_h. Cell gives the op's gate count
// (kGates), its default activations (defaults()), its forward scratch (Scratch<T>, with
// carve(Carver&, const Dims&)) and its forward (forward(pool, args, scratch, y, yh)).
template <typename Cell>
class ForwardKernel final : public RecurrentKernel<ForwardKernel<Cell>> {
 public:
  explicit ForwardKernel(const KernelInfo& info)
      : RecurrentKernel<ForwardKernel<Cell>>(info, Cell::kGates, Cell::defaults()) {}

  template <typename T>
  void run(KernelContext& ctx) const {
    Args<T> a = make_args<T>(ctx, this->spec_, false);
    T* y = needed_output<T>(ctx, 0, a.dims.y_shape());
    T* yh = needed_output<T>(ctx, 1, a.dims.state_shape());
    typename Cell::template Scratch<T> s;
    carve_scratch(ctx, [&](Carver& cv) { s.carve(cv, a.dims); });
    Cell::forward(ctx.threads(), a, s, y, yh);
  }
};

// The rows of one step of the backward sweep, in parallel: each batch row b still inside its
// sequence gets cell(b, t, row, dg), t its time, row its row of X and dg its G gate gradients; the
// others get zero gate gradients, so that the step's products leave their state gradients as
// they are.
template <typename T, typename Cell>
void backward_rows(ThreadPool& pool, const Dims& D, const std::vector<int64_t>& lens, bool reverse, int64_t step,
                   int64_t G, T* dgs, Cell&& cell) {
  pool.parallel_for(D.B, row_grain(G), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t len = lens[static_cast<size_t>(b)];
      T* dg = dgs + b * G;
      if (step >= len) {
        std::fill_n(dg, G, T(0));
        continue;
      }
      const int64_t t = time_at(reverse, step, len);
      cell(b, t, D.x_row(t, b), dg);
    }
  });
}

// One step of a direction whose gate rows need the whole recurrent product: gh = h R^T ([B, G],
// G the gates' width) plus each row's input projection (gx at the row of X the step reads), then
// cell(b, t, g) on the G gates g of each batch row b still inside its sequence, t its time.
template <typename T, typename Cell>
void recurrent_step(ThreadPool& pool, const Dims& D, const std::vector<int64_t>& lens, bool reverse, int64_t step,
                    int64_t G, const T* h, const T* R, const T* gx, T* gh, Cell&& cell) {
  matmul<T>(pool, false, true, D.B, G, D.H, h, D.H, R, D.H, T(0), gh, G);
  pool.parallel_for(D.B, row_grain(G), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t len = lens[static_cast<size_t>(b)];
      if (step >= len) continue;
      const int64_t t = time_at(reverse, step, len);
      T* g = gh + b * G;
      const T* xg = gx + D.x_row(t, b) * G;
      for (int64_t j = 0; j < G; ++j) g[j] += xg[j];
      cell(b, t, g);
    }
  });
}

// state[b] = initial[d, b] (or zeros), for every batch row.
template <typename T>
void load_states(const Dims& dims, int d, const T* initial, T* state) {
  for (int64_t b = 0; b < dims.B; ++b) {
    T* dst = state + b * dims.H;
    if (initial) std::copy_n(initial + dims.state_offset(d, b), dims.H, dst);
    else std::fill_n(dst, dims.H, T(0));
  }
}

// out[d, b] = state[b] (out may be null).
template <typename T>
void store_states(const Dims& dims, int d, const T* state, T* out) {
  if (!out) return;
  for (int64_t b = 0; b < dims.B; ++b) std::copy_n(state + b * dims.H, dims.H, out + dims.state_offset(d, b));
}

// Y = 0 at t >= length, per batch row.
template <typename T>
void zero_padding(const Dims& dims, const std::vector<int64_t>& lens, int d, T* y) {
  if (!y) return;
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t t = lens[static_cast<size_t>(b)]; t < dims.T; ++t) std::fill_n(y + dims.y_offset(t, d, b), dims.H, T(0));
}

// The gradient buffers' rows past each entry's length are zero (the big GEMMs read all rows).
template <typename T>
void zero_padded_rows(const Dims& dims, const std::vector<int64_t>& lens, int64_t width, T* m) {
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t t = lens[static_cast<size_t>(b)]; t < dims.T; ++t) std::fill_n(m + dims.x_row(t, b) * width, width, T(0));
}

// x W^T (+ bias[G]) for every row, into out [rows, G]; W is [G, I].
template <typename T>
void project_inputs(ThreadPool& pool, const Dims& D, const T* x, const T* w, int64_t G, const T* bias, T* out) {
  matmul<T>(pool, false, true, D.rows(), G, D.I, x, D.I, w, D.I, T(0), out, G);
  if (!bias) return;
  pool.parallel_for(D.rows(), row_grain(G), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < G; ++j) out[r * G + j] += bias[j];
  });
}

// The Grad ops' outputs beyond the gradients of the forward inputs are named by the input they
// differentiate; this maps a forward input to the Grad op's output position (-1: none).
inline int grad_output_of_input(int input) {
  switch (input) {
    case kX: return 0;
    case kW: return 1;
    case kR: return 2;
    case kB: return 3;
    case kInitialH: return 4;
    case kInitialC: return 5;
    case kP: return 6;
    default: return -1;
  }
}

}  // namespace onnxtrain::rnn

namespace onnxtrain {
class GradBuilder;
namespace rnn {
// The gradient rule of all three ops: one <op>Grad node taking the forward inputs (num_inputs of
// them, absent ones empty), Y (when the forward produced it; else the Grad op reruns the
// forward) and the gradients of the outputs (absent ones empty: zeros).
// `stash`: forward values appended to the backward op's inputs (LSTMTraining's gates and cells).
void emit_rnn_gradient(GradBuilder& g, const std::string& grad_op, int num_forward_inputs, int num_outputs,
                       const std::vector<std::string>& stash = {});
// GRU's and RNN's rule: their Grad op (op type + "Grad") with six forward inputs and two outputs.
void emit_plain_rnn_gradient(GradBuilder& g);
}  // namespace rnn
}  // namespace onnxtrain
