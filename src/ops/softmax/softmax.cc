// Softmax and LogSoftmax, and their fused backward kernels SoftmaxGrad and LogSoftmaxGrad, which
// work from the output alone (so backward stashes Y, not X).
//
// Before opset 13 both coerce the input to 2-D at `axis` (default 1) and normalize each row of
// the flattened trailing dims; since 13 they normalize along the one axis (default -1). A
// contiguous row (the last axis, or any 2-D coercion) is processed whole while it sits in cache:
// max, exp-and-sum, scale. Along an inner axis, blocks of columns do the same, vectorized
// across columns. Both split across threads by rows or column blocks. bfloat16 and float16 are
// read and written by the kernels, computed in float32 and rounded once, as PyTorch's CPU kernels
// do.
#include <vector>

#include "autodiff/grad_builder.h"
#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/softmax/softmax_math.h"

namespace onnxtrain {
namespace {

using softmax_math::for_each_slice;
using softmax_math::kCols;
using softmax_math::max_lanes;
using softmax_math::sum_lanes;
using softmax_math::vexp;

struct SoftmaxAxis {
  int64_t axis;
  bool coerce_2d;

  SoftmaxAxis(const Node& node, int opset)
      : axis(node.attr_int("axis", opset < 13 ? 1 : -1)), coerce_2d(opset < 13) {}
  SoftmaxAxis(int64_t a, bool c) : axis(a), coerce_2d(c) {}

  AxisSplit split(const TensorShape& shape, const char* what) const {
    OT_CHECK(shape.rank() >= 1 || coerce_2d, what, ": the input must have rank >= 1, got a scalar");
    if (coerce_2d) {
      // Opset < 13 accepts axis == rank (every row of length 1).
      const int64_t a = axis < 0 ? axis + shape.rank() : axis;
      OT_CHECK(a >= 0 && a <= shape.rank(), what, ": axis ", axis, " is out of range for rank ", shape.rank());
      return split_flatten_from(shape, static_cast<int>(a));
    }
    return split_at_axis(shape, normalize_axis(axis, shape.rank(), what));
  }
  AttributeMap attrs() const {
    return {{"axis", Attribute::of_int(axis)}, {"coerce_2d", Attribute::of_int(coerce_2d ? 1 : 0)}};
  }
};

SoftmaxAxis grad_axis(const KernelInfo& info) {
  return {info.node.attr_int("axis", -1), info.node.attr_int("coerce_2d", 0) != 0};
}

// One contiguous row of n values in T: y = softmax(x), or log-softmax.
template <typename T, bool kLog>
void softmax_row(const T* xr, T* yr, int64_t n) {
  const T m = max_lanes(xr, n);
  if constexpr (kLog) {
    const T lse = m + std::log(sum_lanes<T>(n, [&](int64_t k) { return vexp(xr[k] - m); }));
    for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] - lse;
  } else {
    const T inv = T(1) / sum_lanes<T>(n, [&](int64_t k) {
      const T e = vexp(xr[k] - m);
      yr[k] = e;
      return e;
    });
    for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
  }
}

// Rows up to this long are widened on the stack (two float copies, 32 KB).
constexpr int64_t kStackRow = 4096;

// X and Y stored as S (float, double, or a 16-bit float computed in float32 and rounded once).
template <typename S, bool kLog>
void softmax_forward(ThreadPool& pool, const S* x, S* y, const AxisSplit& s) {
  using T = ComputeType<S>;
  const int64_t n = s.n, stride = s.inner;
  auto row = [&](int64_t o) {
    const S* xr = x + o * n;
    S* yr = y + o * n;
    if constexpr (!kIs16BitFloat<S>) {
      softmax_row<T, kLog>(xr, yr, n);
    } else {
      // A 16-bit row is widened once into float, computed there (the exps kept in float), and
      // rounded once on the way out.
      float in_stack[kStackRow], out_stack[kStackRow];
      std::vector<float> in_heap, out_heap;
      float* in = in_stack;
      float* out = out_stack;
      if (n > kStackRow) {
        in_heap.resize(static_cast<size_t>(n));
        out_heap.resize(static_cast<size_t>(n));
        in = in_heap.data();
        out = out_heap.data();
      }
      for (int64_t k = 0; k < n; ++k) in[k] = widened_from(xr[k]);
      softmax_row<float, kLog>(in, out, n);
      for (int64_t k = 0; k < n; ++k) yr[k] = rounded_to<S>(out[k]);
    }
  };
  auto block = [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t off = o * n * stride + c0;
    T m[kCols], acc[kCols];
    for (int64_t c = 0; c < w; ++c) m[c] = widened_from(x[off + c]);
    for (int64_t k = 1; k < n; ++k) {
      const S* xr = x + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        const T v = widened_from(xr[c]);
        m[c] = v > m[c] ? v : m[c];
      }
    }
    for (int64_t c = 0; c < w; ++c) acc[c] = 0;
    for (int64_t k = 0; k < n; ++k) {
      const S* xr = x + off + k * stride;
      S* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        const T e = vexp(widened_from(xr[c]) - m[c]);
        // Y holds the exps until they are scaled; a 16-bit Y could not hold them unrounded, so
        // there they are computed again.
        if constexpr (!kLog && !kIs16BitFloat<S>) yr[c] = e;
        acc[c] += e;
      }
    }
    for (int64_t c = 0; c < w; ++c) acc[c] = kLog ? m[c] + std::log(acc[c]) : T(1) / acc[c];
    for (int64_t k = 0; k < n; ++k) {
      const S* xr = x + off + k * stride;
      S* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (kLog) yr[c] = rounded_to<S>(widened_from(xr[c]) - acc[c]);
        else if constexpr (kIs16BitFloat<S>) yr[c] = rounded_to<S>(vexp(widened_from(xr[c]) - m[c]) * acc[c]);
        else yr[c] *= acc[c];
      }
    }
  };
  for_each_slice(pool, s, row, block);
}

// Softmax:    dX = Y (dY - sum(dY Y))
// LogSoftmax: dX = dY - exp(Y) sum(dY)
// dY, Y and dX stored as S, computed in S's compute type.
template <typename S, bool kLog>
void softmax_backward(ThreadPool& pool, const S* dy, const S* y, S* dx, const AxisSplit& s) {
  using T = ComputeType<S>;
  const int64_t n = s.n, stride = s.inner;
  auto row = [&](int64_t o) {
    const int64_t off = o * n;
    const S* g = dy + off;
    const S* yr = y + off;
    S* out = dx + off;
    if constexpr (kLog) {
      const T sum = sum_lanes<T>(n, [&](int64_t k) { return widened_from(g[k]); });
      for (int64_t k = 0; k < n; ++k) out[k] = rounded_to<S>(widened_from(g[k]) - vexp(widened_from(yr[k])) * sum);
    } else {
      const T dot = sum_lanes<T>(n, [&](int64_t k) { return widened_from(g[k]) * widened_from(yr[k]); });
      for (int64_t k = 0; k < n; ++k) out[k] = rounded_to<S>(widened_from(yr[k]) * (widened_from(g[k]) - dot));
    }
  };
  auto block = [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t off = o * n * stride + c0;
    T acc[kCols] = {};
    for (int64_t k = 0; k < n; ++k) {
      const S* g = dy + off + k * stride;
      const S* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c)
        acc[c] += kLog ? widened_from(g[c]) : widened_from(g[c]) * widened_from(yr[c]);
    }
    for (int64_t k = 0; k < n; ++k) {
      const S* g = dy + off + k * stride;
      const S* yr = y + off + k * stride;
      S* out = dx + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (kLog) out[c] = rounded_to<S>(widened_from(g[c]) - vexp(widened_from(yr[c])) * acc[c]);
        else out[c] = rounded_to<S>(widened_from(yr[c]) * (widened_from(g[c]) - acc[c]));
      }
    }
  };
  for_each_slice(pool, s, row, block);
}

// Softmax's element types: the floats, and the 16-bit floats read and written by the kernels.
template <typename Fn>
void dispatch_softmax(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Float16: fn(TypeTag<Half>{}); break;
    case DType::BFloat16: fn(TypeTag<BHalf>{}); break;
    default: dispatch_float(t, what, std::forward<Fn>(fn));
  }
}

template <bool kLog>
class SoftmaxKernel final : public Kernel {
 public:
  explicit SoftmaxKernel(const KernelInfo& info) : axis_(info.node, info.opset) {}
  void compute(KernelContext& ctx) const override {
    const char* name = kLog ? "LogSoftmax" : "Softmax";
    const Tensor& x = ctx.input(0);
    const AxisSplit s = axis_.split(x.shape(), name);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch_softmax(x.dtype(), name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_forward<T, kLog>(ctx.threads(), x.data<T>(), y.data<T>(), s);
    });
  }

 private:
  SoftmaxAxis axis_;
};

// Inputs: dY, Y. Attributes: axis and coerce_2d (the forward node's opset < 13 layout).
template <bool kLog>
class SoftmaxGradKernel final : public Kernel {
 public:
  explicit SoftmaxGradKernel(const KernelInfo& info) : axis_(grad_axis(info)) {}
  void compute(KernelContext& ctx) const override {
    const char* name = kLog ? "LogSoftmaxGrad" : "SoftmaxGrad";
    const Tensor& dy = ctx.input(0);
    const Tensor& y = ctx.input(1);
    OT_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), "dY ", dy.str(), " and Y ", y.str(),
             " must match");
    const AxisSplit s = axis_.split(y.shape(), name);
    Tensor& dx = ctx.allocate_output(0, y.dtype(), y.shape());
    dispatch_softmax(y.dtype(), name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_backward<T, kLog>(ctx.threads(), dy.data<T>(), y.data<T>(), dx.data<T>(), s);
    });
  }

 private:
  SoftmaxAxis axis_;
};

void softmax_gradient(GradBuilder& g) {
  SoftmaxAxis axis(g.node(), g.opset());
  g.set_input_grad(0, g.op("SoftmaxGrad", {g.output_grad(0), g.output(0)}, axis.attrs(), kOnnxTrainDomain));
}

void log_softmax_gradient(GradBuilder& g) {
  SoftmaxAxis axis(g.node(), g.opset());
  g.set_input_grad(0, g.op("LogSoftmaxGrad", {g.output_grad(0), g.output(0)}, axis.attrs(), kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Softmax", kernel_factory<SoftmaxKernel<false>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "LogSoftmax", kernel_factory<SoftmaxKernel<true>>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftmaxGrad", kernel_factory<SoftmaxGradKernel<false>>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "LogSoftmaxGrad", kernel_factory<SoftmaxGradKernel<true>>(),
                 Recompute::Costly, Rounding::PerValue);
// 16-bit X: read, computed in float32 and rounded once by the kernels themselves.
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Softmax", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "LogSoftmax", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "SoftmaxGrad", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "LogSoftmaxGrad", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Softmax", softmax_gradient);
ONNXTRAIN_GRADIENT("", "LogSoftmax", log_softmax_gradient);

}  // namespace onnxtrain
