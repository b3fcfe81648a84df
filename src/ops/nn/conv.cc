// Conv (1-D to 3-D, groups, strides, pads, dilations, auto_pad, optional bias) and its gradient,
// computed by three backward kernels so that each input's gradient costs only its own work:
//   ConvGradX(dY, W, shape(X)) -> dX    adjoint of the convolution (GEMM + col2im)
//   ConvGradW(dY, X, shape(W)) -> dW    dY x im2col(X)^T, summed over the batch
//   ConvGradB(dY)              -> dB    dY summed over batch and space
// They take Conv's own attributes and resolve the same geometry from the shapes.
#include <algorithm>

#include "autodiff/grad_builder.h"
#include "ops/nn/conv_common.h"
#include "ops/nn/conv_depthwise.h"
#include "ops/nn/conv_onednn.h"
#include "ops/registry.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class ConvKernel final : public Kernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    check_same_dtype(x, "X", w, "W");
    const ConvGeometry g = conv_geometry(attrs_, x.shape(), w.shape());
    const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (b) {
      check_same_dtype(x, "X", *b, "B");
      OT_CHECK(b->rank() == 1 && b->dim(0) == g.col_channels, "B ", b->str(),
               " must be 1-D with one value per output channel (", g.col_channels, ")");
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), g.col_shape());
    if (is_depthwise(g)) {
      dispatch_float(x.dtype(), "Conv", [&](auto tag) {
        using T = typename decltype(tag)::type;
        depthwise_forward<T>(ctx, g, x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y.data<T>());
      });
      return;
    }
    if (x.dtype() == DType::Float32 &&
        onednn_conv_forward(ctx, g, x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr, y.data<float>()))
      return;
    dispatch_float(x.dtype(), "Conv", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_image_to_cols<T>(ctx, g, x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

// Inputs: dY, W, shape(X).
class ConvGradXKernel final : public Kernel {
 public:
  explicit ConvGradXKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& w = ctx.input(1);
    check_same_dtype(dy, "dY", w, "W");
    const ConvGeometry g = conv_geometry(attrs_, shape_input(ctx, 2, "shape of X"), w.shape());
    OT_CHECK(dy.shape() == g.col_shape(), "dY ", dy.str(), " does not have Conv's output shape ", g.col_shape().str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), g.image_shape());
    if (is_depthwise(g)) {
      dispatch_float(dy.dtype(), "ConvGradX", [&](auto tag) {
        using T = typename decltype(tag)::type;
        depthwise_backward_data<T>(ctx, g, dy.data<T>(), w.data<T>(), dx.data<T>());
      });
      return;
    }
    // oneDNN's data gradient is slow with a single input channel; im2col is not.
    if (dy.dtype() == DType::Float32 && g.image_channels / g.group > 1 &&
        onednn_conv_backward_data(ctx, g, dy.data<float>(), w.data<float>(), dx.data<float>()))
      return;
    dispatch_float(dy.dtype(), "ConvGradX", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_cols_to_image<T>(ctx, g, dy.data<T>(), w.data<T>(), nullptr, dx.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

// Inputs: dY, X, shape(W).
class ConvGradWKernel final : public Kernel {
 public:
  explicit ConvGradWKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    check_same_dtype(dy, "dY", x, "X");
    const ConvGeometry g = conv_geometry(attrs_, x.shape(), shape_input(ctx, 2, "shape of W"));
    OT_CHECK(dy.shape() == g.col_shape(), "dY ", dy.str(), " does not have Conv's output shape ", g.col_shape().str());
    Tensor& dw = ctx.allocate_output(0, dy.dtype(), g.weight_shape());
    if (is_depthwise(g)) {
      dispatch_float(dy.dtype(), "ConvGradW", [&](auto tag) {
        using T = typename decltype(tag)::type;
        depthwise_backward_weights<T>(ctx, g, x.data<T>(), dy.data<T>(), dw.data<T>());
      });
      return;
    }
    if (dy.dtype() == DType::Float32 &&
        onednn_conv_backward_weights(ctx, g, x.data<float>(), dy.data<float>(), dw.data<float>()))
      return;
    dispatch_float(dy.dtype(), "ConvGradW", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_weight_grad<T>(ctx, g, x.data<T>(), dy.data<T>(), dw.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

// dB[c] = sum of dY[n, c, ...] over n and space; ConvTranspose's bias gradient too.
void conv_grad_b(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  OT_CHECK(dy.rank() >= 2, "dY must be [N, C, ...], got ", dy.str());
  const int64_t batch = dy.dim(0), channels = dy.dim(1), size = dy.shape().size_between(2, dy.rank());
  Tensor& db = ctx.allocate_output(0, dy.dtype(), {channels});
  dispatch_float(dy.dtype(), "ConvGradB", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = dy.data<T>();
    T* out = db.data<T>();
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, batch * size));
    ctx.threads().parallel_for(channels, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        // Double accumulators (float sums over batch x space lose digits), four of them so the
        // additions do not wait on each other.
        double s[4] = {0, 0, 0, 0};
        for (int64_t n = 0; n < batch; ++n) {
          const T* plane = p + (n * channels + c) * size;
          int64_t i = 0;
          for (; i + 4 <= size; i += 4)
            for (int j = 0; j < 4; ++j) s[j] += plane[i + j];
          for (; i < size; ++i) s[0] += plane[i];
        }
        out[c] = static_cast<T>((s[0] + s[1]) + (s[2] + s[3]));
      }
    });
  });
}

void conv_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  const AttributeMap& attrs = g.node().attrs;  // every Conv attribute describes the geometry
  if (g.needs_input_grad(0))
    g.set_input_grad(0, g.op("ConvGradX", {dy, g.input(1), g.shape_of(g.input(0))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(1))
    g.set_input_grad(1, g.op("ConvGradW", {dy, g.input(0), g.shape_of(g.input(1))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(2)) g.set_input_grad(2, g.op("ConvGradB", {dy}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Conv", kernel_factory<ConvKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradX", kernel_factory<ConvGradXKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradW", kernel_factory<ConvGradWKernel>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradB", kernel_factory(&conv_grad_b));
ONNXTRAIN_GRADIENT("", "Conv", conv_gradient);

}  // namespace onnxtrain
