// Min, Max and Mean over any number of broadcasting inputs, and their gradients.
//
// Gradients follow PyTorch 1.13: with two inputs, as torch.minimum/maximum (ties split the
// gradient in halves; NaN passes it to both); with more, as torch.min/max of a stack along a new
// dim (all of it to the first input holding the extreme, NaN counting as the extreme).
#include "autodiff/grad_builder.h"
#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

struct MaxOp {
  static constexpr const char* kName = "Max";
  // NaN wins, as in numpy.maximum and torch.maximum.
  template <typename T> static bool first_wins(T a, T b) { return a >= b || a != a; }
  template <typename T> static bool strictly_better(T a, T b) { return a > b; }
};
struct MinOp {
  static constexpr const char* kName = "Min";
  template <typename T> static bool first_wins(T a, T b) { return a <= b || a != a; }
  template <typename T> static bool strictly_better(T a, T b) { return a < b; }
};

TensorShape output_shape(KernelContext& ctx, const char* what) {
  std::vector<TensorShape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    OT_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), what, ": inputs have different element types: ",
             ctx.input(0).str(), " and ", ctx.input(i).str());
    shapes.push_back(ctx.input(i).shape());
  }
  return broadcast_shapes(shapes, what);
}

// out = fold(op, inputs), accumulating in the output.
template <typename T, typename Op>
void fold(KernelContext& ctx, const TensorShape& shape, T* o, Op op) {
  const Tensor& first = ctx.input(0);
  if (ctx.num_inputs() == 1) {
    unary_map(ctx.threads(), first.data<T>(), o, first.numel(), [](T v) { return v; });
    return;
  }
  binary_broadcast(ctx.threads(), first.data<T>(), first.shape(), ctx.input(1).data<T>(), ctx.input(1).shape(), o,
                   shape, op);
  for (int i = 2; i < ctx.num_inputs(); ++i)
    binary_broadcast(ctx.threads(), static_cast<const T*>(o), shape, ctx.input(i).data<T>(), ctx.input(i).shape(), o,
                     shape, op);
}

template <typename Op>
void min_max(KernelContext& ctx) {
  TensorShape shape = output_shape(ctx, Op::kName);
  DType dt = ctx.input(0).dtype();
  Tensor& out = ctx.allocate_output(0, dt, shape);
  if (dt == DType::Float16) {
    fold<Half>(ctx, shape, out.data<Half>(),
               [](Half a, Half b) { return Op::first_wins(half_to_float(a), half_to_float(b)) ? a : b; });
    return;
  }
  dispatch_numeric(dt, Op::kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fold<T>(ctx, shape, out.data<T>(), [](T a, T b) { return Op::first_wins(a, b) ? a : b; });
  });
}

void mean(KernelContext& ctx) {
  TensorShape shape = output_shape(ctx, "Mean");
  Tensor& out = ctx.allocate_output(0, ctx.input(0).dtype(), shape);
  dispatch_float(out.dtype(), "Mean", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    fold<T>(ctx, shape, o, [](T a, T b) { return a + b; });
    const T n = static_cast<T>(ctx.num_inputs());
    unary_map(ctx.threads(), static_cast<const T*>(o), o, out.numel(), [n](T v) { return v / n; });
  });
}

// Calls f(element, offsets) for every element of `out` in order, offsets[k] indexing input k.
template <typename F>
void walk_broadcast(const TensorShape& out, const std::vector<TensorShape>& ins, F f) {
  const int rank = out.rank();
  const size_t n = ins.size();
  std::vector<std::array<int64_t, TensorShape::kMaxRank>> strides;
  for (const auto& s : ins) strides.push_back(broadcast_strides(s, out));
  std::array<int64_t, TensorShape::kMaxRank> idx{};
  std::vector<int64_t> off(n, 0);
  const int64_t total = out.numel();
  for (int64_t e = 0; e < total; ++e) {
    f(e, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) {
        for (size_t k = 0; k < n; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < n; ++k) off[k] -= strides[k][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

// <Op>Grad(dY, X0, ..., Xn-1), attribute input = i: the gradient of Xi, shaped like dY.
template <typename Op>
class MinMaxGradKernel final : public Kernel {
 public:
  explicit MinMaxGradKernel(const KernelInfo& info)
      : input_(grad_input_attr(info, static_cast<int>(info.node.inputs.size()) - 1, "MinMaxGrad")) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const int n = ctx.num_inputs() - 1;
    Tensor& out = ctx.allocate_output(0, dy.dtype(), dy.shape());
    dispatch_float(dy.dtype(), "MinMaxGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* g = dy.data<T>();
      T* o = out.data<T>();
      if (n == 2) {
        const Tensor& self = ctx.input(1 + input_);
        const Tensor& other = ctx.input(2 - input_);
        ternary_broadcast(ctx.threads(), g, dy.shape(), self.data<T>(), self.shape(), other.data<T>(), other.shape(),
                          o, dy.shape(), [](T d, T a, T b) {
                            if (a == b) return d * T(0.5);
                            return Op::strictly_better(b, a) ? T(0) : d;
                          });
        return;
      }
      std::vector<const T*> xs;
      std::vector<TensorShape> shapes;
      for (int k = 0; k < n; ++k) {
        xs.push_back(ctx.input(1 + k).data<T>());
        shapes.push_back(ctx.input(1 + k).shape());
      }
      const int want = input_;
      walk_broadcast(dy.shape(), shapes, [&](int64_t e, const std::vector<int64_t>& off) {
        int best = 0;
        T v = xs[0][off[0]];
        for (int k = 1; k < n && v == v; ++k) {
          T c = xs[k][off[k]];
          if (c != c || Op::strictly_better(c, v)) {
            best = k;
            v = c;
          }
        }
        o[e] = best == want ? g[e] : T(0);
      });
    });
  }

 private:
  int input_;
};

template <typename Op>
void min_max_gradient(GradBuilder& g) {
  if (g.num_inputs() == 1) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  std::vector<std::string> inputs{g.output_grad(0)};
  for (int i = 0; i < g.num_inputs(); ++i) inputs.push_back(g.input(i));
  for (int i = 0; i < g.num_inputs(); ++i) {
    if (!g.needs_input_grad(i)) continue;
    std::string d = g.op(std::string(Op::kName) + "Grad", inputs, {{"input", Attribute::of_int(i)}}, kOnnxTrainDomain);
    g.set_input_grad(i, g.reduce_to_input_shape(d, i));
  }
}

void mean_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  std::string share = g.num_inputs() == 1 ? dy : g.op("Mul", {dy, g.scalar_like(1.0 / g.num_inputs(), dy)});
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.needs_input_grad(i)) g.set_input_grad(i, g.reduce_to_input_shape(share, i));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Max", kernel_factory(&min_max<MaxOp>), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Min", kernel_factory(&min_max<MinOp>), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Mean", kernel_factory(&mean), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MaxGrad", kernel_factory<MinMaxGradKernel<MaxOp>>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MinGrad", kernel_factory<MinMaxGradKernel<MinOp>>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Max", min_max_gradient<MaxOp>);
ONNXTRAIN_GRADIENT("", "Min", min_max_gradient<MinOp>);
ONNXTRAIN_GRADIENT("", "Mean", mean_gradient);

}  // namespace onnxtrain
