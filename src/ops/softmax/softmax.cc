// Softmax and LogSoftmax, and their fused backward kernels SoftmaxGrad and LogSoftmaxGrad, which
// work from the output alone (so backward stashes Y, not X).
//
// Before opset 13 both coerce the input to 2-D at `axis` (default 1) and normalize each row of
// the flattened trailing dims; since 13 they normalize along the one axis (default -1). A
// contiguous row (the last axis, or any 2-D coercion) is processed whole while it sits in cache:
// max, exp-and-sum, scale. Along an inner axis, blocks of columns do the same, vectorized
// across columns. Both split across threads by rows or column blocks.
#include "autodiff/grad_builder.h"
#include "ops/registry.h"
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

template <typename T, bool kLog>
void softmax_forward(ThreadPool& pool, const T* x, T* y, const AxisSplit& s) {
  const int64_t n = s.n, stride = s.inner;
  auto row = [&](int64_t o) {
    const int64_t off = o * n;
    const T* xr = x + off;
    T* yr = y + off;
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
  };
  auto block = [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t off = o * n * stride + c0;
    T m[kCols], acc[kCols];
    for (int64_t c = 0; c < w; ++c) m[c] = x[off + c];
    for (int64_t k = 1; k < n; ++k) {
      const T* xr = x + off + k * stride;
      for (int64_t c = 0; c < w; ++c) m[c] = xr[c] > m[c] ? xr[c] : m[c];
    }
    for (int64_t c = 0; c < w; ++c) acc[c] = 0;
    for (int64_t k = 0; k < n; ++k) {
      const T* xr = x + off + k * stride;
      T* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        const T e = vexp(xr[c] - m[c]);
        if constexpr (!kLog) yr[c] = e;
        acc[c] += e;
      }
    }
    for (int64_t c = 0; c < w; ++c) acc[c] = kLog ? m[c] + std::log(acc[c]) : T(1) / acc[c];
    for (int64_t k = 0; k < n; ++k) {
      const T* xr = x + off + k * stride;
      T* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (kLog) yr[c] = xr[c] - acc[c];
        else yr[c] *= acc[c];
      }
    }
  };
  for_each_slice(pool, s, row, block);
}

// Softmax:    dX = Y (dY - sum(dY Y))
// LogSoftmax: dX = dY - exp(Y) sum(dY)
template <typename T, bool kLog>
void softmax_backward(ThreadPool& pool, const T* dy, const T* y, T* dx, const AxisSplit& s) {
  const int64_t n = s.n, stride = s.inner;
  auto row = [&](int64_t o) {
    const int64_t off = o * n;
    const T* g = dy + off;
    const T* yr = y + off;
    T* out = dx + off;
    if constexpr (kLog) {
      const T sum = sum_lanes<T>(n, [&](int64_t k) { return g[k]; });
      for (int64_t k = 0; k < n; ++k) out[k] = g[k] - vexp(yr[k]) * sum;
    } else {
      const T dot = sum_lanes<T>(n, [&](int64_t k) { return g[k] * yr[k]; });
      for (int64_t k = 0; k < n; ++k) out[k] = yr[k] * (g[k] - dot);
    }
  };
  auto block = [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t off = o * n * stride + c0;
    T acc[kCols] = {};
    for (int64_t k = 0; k < n; ++k) {
      const T* g = dy + off + k * stride;
      const T* yr = y + off + k * stride;
      for (int64_t c = 0; c < w; ++c) acc[c] += kLog ? g[c] : g[c] * yr[c];
    }
    for (int64_t k = 0; k < n; ++k) {
      const T* g = dy + off + k * stride;
      const T* yr = y + off + k * stride;
      T* out = dx + off + k * stride;
      for (int64_t c = 0; c < w; ++c) {
        if constexpr (kLog) out[c] = g[c] - vexp(yr[c]) * acc[c];
        else out[c] = yr[c] * (g[c] - acc[c]);
      }
    }
  };
  for_each_slice(pool, s, row, block);
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
    dispatch_float(x.dtype(), name, [&](auto tag) {
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
    dispatch_float(y.dtype(), name, [&](auto tag) {
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

ONNXTRAIN_KERNEL("", "Softmax", kernel_factory<SoftmaxKernel<false>>());
ONNXTRAIN_KERNEL("", "LogSoftmax", kernel_factory<SoftmaxKernel<true>>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SoftmaxGrad", kernel_factory<SoftmaxGradKernel<false>>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "LogSoftmaxGrad", kernel_factory<SoftmaxGradKernel<true>>());
ONNXTRAIN_GRADIENT("", "Softmax", softmax_gradient);
ONNXTRAIN_GRADIENT("", "LogSoftmax", log_softmax_gradient);

}  // namespace onnxtrain
