// Shape-only ops that reuse their input's memory: Identity, Reshape, Flatten, Squeeze, Unsqueeze.
// Each gradient reshapes the incoming gradient back to the input's shape.
#include "autodiff/grad_builder.h"
#include "core/checked_math.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

void identity(KernelContext& ctx) { ctx.alias_input(0, 0, ctx.input(0).shape()); }

class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info) : allow_zero_(info.node.attr_int("allowzero", 0) != 0) {
    if (info.opset < 5) {
      static_shape_ = info.node.attr_ints("shape");
      from_attribute_ = true;
    }
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> spec = from_attribute_ ? static_shape_ : ctx.input(1).to_int64_vector();
    TensorShape shape;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < spec.size(); ++i) {
      int64_t d = spec[i];
      if (d == 0 && !allow_zero_) {
        OT_CHECK(static_cast<int>(i) < x.rank(), "shape ", i, " is 0 (copy) but the input ", x.str(), " has rank ",
                 x.rank());
        d = x.dim(static_cast<int>(i));
      }
      if (d == -1) {
        OT_CHECK(infer < 0, "more than one -1 in the target shape");
        infer = static_cast<int>(i);
        shape.push_back(1);
        continue;
      }
      OT_CHECK(d >= 0, "invalid target dimension ", d);
      known = checked_mul(known, d, "Reshape target shape");
      shape.push_back(d);
    }
    if (infer >= 0) {
      OT_CHECK(known != 0 && x.numel() % known == 0, "cannot reshape ", x.str(), " with a -1 dimension into ",
               known, "-element blocks");
      shape[infer] = x.numel() / known;
    }
    OT_CHECK(shape.numel() == x.numel(), "cannot reshape ", x.str(), " into ", shape.str());
    ctx.alias_input(0, 0, shape);
  }

 private:
  bool allow_zero_;
  bool from_attribute_ = false;
  std::vector<int64_t> static_shape_;
};

class FlattenKernel final : public Kernel {
 public:
  explicit FlattenKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 1)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    // Flatten's axis may equal the rank (everything in the first dim), so it is not a plain axis.
    int64_t axis = axis_ < 0 ? axis_ + x.rank() : axis_;
    OT_CHECK(axis >= 0 && axis <= x.rank(), "axis ", axis_, " is out of range for ", x.str());
    const int split = static_cast<int>(axis);
    ctx.alias_input(0, 0, {x.shape().size_between(0, split), x.shape().size_between(split, x.rank())});
  }

 private:
  int64_t axis_;
};

// Squeeze and Unsqueeze take axes as an attribute before opset 13, as an input since.
std::vector<int64_t> axes_of(const KernelContext& ctx, const std::vector<int64_t>& attr_axes, bool from_input) {
  if (!from_input) return attr_axes;
  return ctx.has_input(1) ? ctx.input(1).to_int64_vector() : std::vector<int64_t>{};
}

class SqueezeKernel final : public Kernel {
 public:
  explicit SqueezeKernel(const KernelInfo& info)
      : axes_(info.node.attr_ints("axes")), from_input_(info.opset >= 13) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = axes_of(ctx, axes_, from_input_);
    std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
    if (axes.empty()) {
      for (int d = 0; d < x.rank(); ++d) drop[d] = x.dim(d) == 1;
    }
    for (int64_t a : axes) {
      int d = normalize_axis(a, x.rank(), "Squeeze");
      OT_CHECK(x.dim(d) == 1, "cannot squeeze axis ", a, " of ", x.str(), ": its size is not 1");
      drop[d] = true;
    }
    TensorShape shape;
    for (int d = 0; d < x.rank(); ++d)
      if (!drop[d]) shape.push_back(x.dim(d));
    ctx.alias_input(0, 0, shape);
  }

 private:
  std::vector<int64_t> axes_;
  bool from_input_;
};

class UnsqueezeKernel final : public Kernel {
 public:
  explicit UnsqueezeKernel(const KernelInfo& info)
      : axes_(info.node.attr_ints("axes")), from_input_(info.opset >= 13) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = axes_of(ctx, axes_, from_input_);
    const int rank = x.rank() + static_cast<int>(axes.size());
    std::vector<bool> inserted(static_cast<size_t>(rank), false);
    for (int64_t a : axes) {
      int d = normalize_axis(a, rank, "Unsqueeze");
      OT_CHECK(!inserted[d], "axis ", a, " is repeated");
      inserted[d] = true;
    }
    TensorShape shape;
    int src = 0;
    for (int d = 0; d < rank; ++d) shape.push_back(inserted[d] ? 1 : x.dim(src++));
    ctx.alias_input(0, 0, shape);
  }

 private:
  std::vector<int64_t> axes_;
  bool from_input_;
};

void identity_gradient(GradBuilder& g) { g.set_input_grad(0, g.output_grad(0)); }

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient is dY reshaped to X's shape.
void reshape_like_gradient(GradBuilder& g) {
  // allowzero: a 0 in the input's shape is an empty dim, not "copy this dim".
  g.set_input_grad(0, g.op("Reshape", {g.output_grad(0), g.shape_of(g.input(0))}, {{"allowzero", Attribute::of_int(1)}}));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Identity", kernel_factory(&identity), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Identity", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Reshape", kernel_factory<ReshapeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Reshape", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Flatten", kernel_factory<FlattenKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Flatten", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Squeeze", kernel_factory<SqueezeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Squeeze", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Unsqueeze", kernel_factory<UnsqueezeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Unsqueeze", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Identity", identity_gradient);
ONNXTRAIN_GRADIENT("", "Reshape", reshape_like_gradient);
ONNXTRAIN_GRADIENT("", "Flatten", reshape_like_gradient);
ONNXTRAIN_GRADIENT("", "Squeeze", reshape_like_gradient);
ONNXTRAIN_GRADIENT("", "Unsqueeze", reshape_like_gradient);

}  // namespace onnxtrain
