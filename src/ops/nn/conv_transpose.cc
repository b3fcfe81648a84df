// ConvTranspose (1-D to 3-D, groups, strides, pads, dilations, output_padding, output_shape,
// auto_pad, optional bias) and its gradient. ConvTranspose is the adjoint of a Conv whose input
// is ConvTranspose's output, so the three conv primitives swap roles:
//   forward                             Conv's data gradient (GEMM + col2im) of X
//   ConvTransposeGradX(dY, W, shape(X)) Conv of dY with W
//   ConvTransposeGradW(dY, X, shape(W)) Conv's weight gradient with dY as image, X as columns
//   ConvGradB(dY)                       shared with Conv
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/conv_common.h"

namespace onnxtrain {
namespace {

class ConvTransposeKernel final : public Kernel {
 public:
  explicit ConvTransposeKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    check_same_dtype(x, "X", w, "W");
    const ConvGeometry g = conv_transpose_geometry(attrs_, x.shape(), w.shape());
    const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (b) {
      check_same_dtype(x, "X", *b, "B");
      OT_CHECK(b->rank() == 1 && b->dim(0) == g.image_channels, "B ", b->str(),
               " must be 1-D with one value per output channel (", g.image_channels, ")");
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), g.image_shape());
    dispatch_float(x.dtype(), "ConvTranspose", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_cols_to_image<T>(ctx, g, x.data<T>(), w.data<T>(), b ? b->data<T>() : nullptr, y.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

// Inputs: dY, W, shape(X).
class ConvTransposeGradXKernel final : public Kernel {
 public:
  explicit ConvTransposeGradXKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& w = ctx.input(1);
    check_same_dtype(dy, "dY", w, "W");
    const ConvGeometry g = conv_transpose_geometry(attrs_, shape_input(ctx, 2, "shape of X"), w.shape());
    OT_CHECK(dy.shape() == g.image_shape(), "dY ", dy.str(), " does not have ConvTranspose's output shape ",
             g.image_shape().str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), g.col_shape());
    dispatch_float(dy.dtype(), "ConvTransposeGradX", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_image_to_cols<T>(ctx, g, dy.data<T>(), w.data<T>(), nullptr, dx.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

// Inputs: dY, X, shape(W).
class ConvTransposeGradWKernel final : public Kernel {
 public:
  explicit ConvTransposeGradWKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    check_same_dtype(dy, "dY", x, "X");
    const ConvGeometry g = conv_transpose_geometry(attrs_, x.shape(), shape_input(ctx, 2, "shape of W"));
    OT_CHECK(dy.shape() == g.image_shape(), "dY ", dy.str(), " does not have ConvTranspose's output shape ",
             g.image_shape().str());
    Tensor& dw = ctx.allocate_output(0, dy.dtype(), g.weight_shape());
    dispatch_float(dy.dtype(), "ConvTransposeGradW", [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_weight_grad<T>(ctx, g, dy.data<T>(), x.data<T>(), dw.data<T>());
    });
  }

 private:
  SpatialAttrs attrs_;
};

void conv_transpose_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  const AttributeMap& attrs = g.node().attrs;  // every ConvTranspose attribute describes the geometry
  if (g.needs_input_grad(0))
    g.set_input_grad(
        0, g.op("ConvTransposeGradX", {dy, g.input(1), g.shape_of(g.input(0))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(1))
    g.set_input_grad(
        1, g.op("ConvTransposeGradW", {dy, g.input(0), g.shape_of(g.input(1))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(2)) g.set_input_grad(2, g.op("ConvGradB", {dy}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ConvTranspose", kernel_factory<ConvTransposeKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvTransposeGradX", kernel_factory<ConvTransposeGradXKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ConvTransposeGradW", kernel_factory<ConvTransposeGradWKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "ConvTranspose", conv_transpose_gradient);

}  // namespace onnxtrain
