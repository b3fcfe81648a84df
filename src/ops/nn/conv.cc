// Conv (1-D to 3-D, groups, strides, pads, dilations, auto_pad, optional bias) and its gradient,
// computed by three backward kernels so that each input's gradient costs only its own work:
//   ConvGradX(dY, W, shape(X)) -> dX    adjoint of the convolution (GEMM + col2im)
//   ConvGradW(dY, X, shape(W)) -> dW    dY x im2col(X)^T, summed over the batch
//   ConvGradB(dY)              -> dB    dY summed over batch and space
// They take Conv's own attributes and resolve the same geometry from the shapes. bfloat16 runs on
// oneDNN's bfloat16 kernels where the CPU has them, else widened to float32; either way the sums
// are float32 and each output is rounded once.
#include <algorithm>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/conv_common.h"
#include "ops/nn/conv_depthwise.h"
#include "ops/nn/conv_onednn.h"
#include "runtime/half_convert.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// The float32 and float64 forward: depthwise blocks, oneDNN, or im2col + GEMM.
void conv_forward(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* b,
                  Tensor& y) {
  if (is_depthwise(g)) {
    dispatch_float(x.dtype(), "Conv", [&](auto tag) {
      using T = typename decltype(tag)::type;
      depthwise_forward<T>(ctx, g, x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y.data<T>());
    });
    return;
  }
  if (x.dtype() == DType::Float32 && onednn_conv_forward(ctx, g, ConvElements::Float32, x.raw_data(), w.raw_data(),
                                                         b ? b->data<float>() : nullptr, y.raw_data()))
    return;
  dispatch_float(x.dtype(), "Conv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_image_to_cols<T>(ctx, g, x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y.data<T>());
  });
}

// bfloat16 on oneDNN's bfloat16 kernels where the CPU has them; elsewhere (or for a geometry they
// lack) widened to float32 and rounded once.
void conv_forward_bfloat16(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                           const Tensor* b, Tensor& y) {
  ThreadPool& pool = ctx.threads();
  Tensor b32;
  if (b) b32 = widened_to_float32(pool, *b);
  const float* bias = b ? b32.data<float>() : nullptr;
  if (onednn_bfloat16_convolutions_native() &&
      onednn_conv_forward(ctx, g, ConvElements::BFloat16, x.raw_data(), w.raw_data(), bias, y.raw_data()))
    return;
  Tensor y32 = Tensor::empty(DType::Float32, y.shape());
  conv_forward(ctx, g, widened_to_float32(pool, x), widened_to_float32(pool, w), b ? &b32 : nullptr, y32);
  round_into(pool, y32.data<float>(), y);
}

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
    if (x.dtype() == DType::BFloat16)
      conv_forward_bfloat16(ctx, g, x, w, b, y);
    else
      conv_forward(ctx, g, x, w, b, y);
  }

 private:
  SpatialAttrs attrs_;
};

void conv_backward_data(KernelContext& ctx, const ConvGeometry& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (is_depthwise(g)) {
    dispatch_float(dy.dtype(), "ConvGradX", [&](auto tag) {
      using T = typename decltype(tag)::type;
      depthwise_backward_data<T>(ctx, g, dy.data<T>(), w.data<T>(), dx.data<T>());
    });
    return;
  }
  // oneDNN's data gradient is slow with a single input channel; im2col is not.
  if (dy.dtype() == DType::Float32 && g.image_channels / g.group > 1 &&
      onednn_conv_backward_data(ctx, g, ConvElements::Float32, dy.raw_data(), w.raw_data(), dx.raw_data()))
    return;
  dispatch_float(dy.dtype(), "ConvGradX", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_cols_to_image<T>(ctx, g, dy.data<T>(), w.data<T>(), nullptr, dx.data<T>());
  });
}

void conv_backward_data_bfloat16(KernelContext& ctx, const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                                 Tensor& dx) {
  if (onednn_bfloat16_convolutions_native() && g.image_channels / g.group > 1 &&
      onednn_conv_backward_data(ctx, g, ConvElements::BFloat16, dy.raw_data(), w.raw_data(), dx.raw_data()))
    return;
  ThreadPool& pool = ctx.threads();
  Tensor dx32 = Tensor::empty(DType::Float32, dx.shape());
  conv_backward_data(ctx, g, widened_to_float32(pool, dy), widened_to_float32(pool, w), dx32);
  round_into(pool, dx32.data<float>(), dx);
}

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
    if (dy.dtype() == DType::BFloat16)
      conv_backward_data_bfloat16(ctx, g, dy, w, dx);
    else
      conv_backward_data(ctx, g, dy, w, dx);
  }

 private:
  SpatialAttrs attrs_;
};

void conv_backward_weights(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw) {
  if (is_depthwise(g)) {
    dispatch_float(dy.dtype(), "ConvGradW", [&](auto tag) {
      using T = typename decltype(tag)::type;
      depthwise_backward_weights<T>(ctx, g, x.data<T>(), dy.data<T>(), dw.data<T>());
    });
    return;
  }
  if (dy.dtype() == DType::Float32 &&
      onednn_conv_backward_weights(ctx, g, ConvElements::Float32, x.raw_data(), dy.raw_data(), dw.data<float>()))
    return;
  dispatch_float(dy.dtype(), "ConvGradW", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_weight_grad<T>(ctx, g, x.data<T>(), dy.data<T>(), dw.data<T>());
  });
}

// The weight gradient sums over the batch in float32 and is rounded once.
void conv_backward_weights_bfloat16(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                                    Tensor& dw) {
  ThreadPool& pool = ctx.threads();
  Tensor dw32 = Tensor::empty(DType::Float32, dw.shape());
  if (!onednn_bfloat16_convolutions_native() ||
      !onednn_conv_backward_weights(ctx, g, ConvElements::BFloat16, x.raw_data(), dy.raw_data(), dw32.data<float>()))
    conv_backward_weights(ctx, g, widened_to_float32(pool, x), widened_to_float32(pool, dy), dw32);
  round_into(pool, dw32.data<float>(), dw);
}

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
    if (dy.dtype() == DType::BFloat16)
      conv_backward_weights_bfloat16(ctx, g, x, dy, dw);
    else
      conv_backward_weights(ctx, g, x, dy, dw);
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

ONNXTRAIN_KERNEL("", "Conv", kernel_factory<ConvKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradX", kernel_factory<ConvGradXKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradW", kernel_factory<ConvGradWKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvGradB", kernel_factory(&conv_grad_b), Recompute::Costly, Rounding::SumOfTerms);
// bfloat16 on oneDNN's bfloat16 convolutions where the CPU has them (conv_*_bfloat16 above);
// float16 is widened by the executor.
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Conv", {DType::BFloat16});
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "ConvGradX", {DType::BFloat16});
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "ConvGradW", {DType::BFloat16});
ONNXTRAIN_GRADIENT("", "Conv", conv_gradient);

}  // namespace onnxtrain
