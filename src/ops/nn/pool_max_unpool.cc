// MaxUnpool: the partial inverse of MaxPool, and ai.onnxtrain::MaxUnpoolGrad, its gradient.
// I holds MaxPool's Indices: flat offsets into an N x C x D1 x ... frame whose spatial dims are
// (in - 1) * stride + kernel - pad_begin - pad_end. The frame is zeros except frame.flat[I[i]] = X[i];
// with an output_shape input the frame then sits at the origin of a zero output of that shape
// (ONNX's reference implementation), else it is the output. With repeated offsets the last one
// written wins. The gradient is dY gathered back at the same places (torch's max_unpool backward).
#include <cstring>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/tensor/indexing.h"

namespace onnxtrain {
namespace {

class UnpoolGeometry {
 public:
  explicit UnpoolGeometry(const Node& node)
      : kernel_(node.attr_ints("kernel_shape")), pads_(node.attr_ints("pads")), strides_(node.attr_ints("strides")) {
    OT_CHECK(!kernel_.empty(), "MaxUnpool: the kernel_shape attribute is required");
    const size_t spatial = kernel_.size();
    if (pads_.empty()) pads_.assign(2 * spatial, 0);
    if (strides_.empty()) strides_.assign(spatial, 1);
    OT_CHECK(pads_.size() == 2 * spatial && strides_.size() == spatial, "MaxUnpool: pads (", pads_.size(),
             " values) and strides (", strides_.size(), ") must match kernel_shape's ", spatial, " spatial dims");
  }

  // The frame I addresses, for X (or I) of shape `x`.
  TensorShape frame(const TensorShape& x) const {
    const int spatial = static_cast<int>(kernel_.size());
    OT_CHECK(x.rank() == spatial + 2, "MaxUnpool: X ", x.str(), " must have rank ", spatial + 2,
             " for a kernel_shape of ", spatial, " dims");
    TensorShape f = x;
    for (int d = 0; d < spatial; ++d) {
      f[d + 2] = (x[d + 2] - 1) * strides_[d] + kernel_[d] - pads_[d] - pads_[d + spatial];
      OT_CHECK(f[d + 2] >= 0, "MaxUnpool: the unpooled shape ", f.str(), " for X ", x.str(), " has a negative dim");
    }
    return f;
  }

  // Offsets in the output of each index, checked against the frame.
  static std::vector<int64_t> output_offsets(const Tensor& indices, const TensorShape& frame, const TensorShape& out) {
    OT_CHECK(out.rank() == frame.rank(), "MaxUnpool: output_shape ", out.str(), " must have rank ", frame.rank());
    for (int d = 0; d < out.rank(); ++d)
      OT_CHECK(out[d] >= frame[d], "MaxUnpool: output_shape ", out.str(), " is smaller than the unpooled shape ",
               frame.str(), " in dim ", d);
    const int64_t n = indices.numel(), bound = frame.numel();
    const Strides out_strides = contiguous_strides(out);
    std::vector<int64_t> offsets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t index = indices.item_as_int(i);
      OT_CHECK(index >= 0 && index < bound, "MaxUnpool: index ", index, " (element ", i,
               " of indices) is outside the unpooled shape ", frame.str(), " of ", bound, " elements");
      if (out == frame) {
        offsets[i] = index;
        continue;
      }
      int64_t offset = 0;
      for (int d = frame.rank() - 1; d >= 0; --d) {
        offset += (index % frame[d]) * out_strides[d];
        index /= frame[d];
      }
      offsets[i] = offset;
    }
    return offsets;
  }

 private:
  std::vector<int64_t> kernel_, pads_, strides_;
};

class MaxUnpoolKernel final : public Kernel {
 public:
  explicit MaxUnpoolKernel(const KernelInfo& info) : geometry_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    OT_CHECK(indices.shape() == x.shape(), "MaxUnpool: indices ", indices.str(), " must have the shape of X ",
             x.str());
    const TensorShape frame = geometry_.frame(x.shape());
    const TensorShape out_shape =
        ctx.has_input(2) ? TensorShape(int_values(ctx.input(2), "MaxUnpool output_shape")) : frame;
    const std::vector<int64_t> offsets = UnpoolGeometry::output_offsets(indices, frame, out_shape);
    Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
    std::memset(y.raw_data(), 0, y.nbytes());
    dispatch_bytes(x.dtype(), "MaxUnpool", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(y.raw_data());
      for (size_t i = 0; i < offsets.size(); ++i) dst[offsets[i]] = src[i];
    });
  }

 private:
  UnpoolGeometry geometry_;
};

// MaxUnpoolGrad(dY, I) -> dX[i] = dY at I[i]'s place; I's shape is X's.
class MaxUnpoolGradKernel final : public Kernel {
 public:
  explicit MaxUnpoolGradKernel(const KernelInfo& info) : geometry_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const std::vector<int64_t> offsets =
        UnpoolGeometry::output_offsets(indices, geometry_.frame(indices.shape()), dy.shape());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), indices.shape());
    dispatch_bytes(dy.dtype(), "MaxUnpoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(dy.raw_data());
      T* dst = static_cast<T*>(dx.raw_data());
      for (size_t i = 0; i < offsets.size(); ++i) dst[i] = src[offsets[i]];
    });
  }

 private:
  UnpoolGeometry geometry_;
};

void max_unpool_gradient(GradBuilder& g) {
  const Node& n = g.node();
  AttributeMap attrs;
  for (const char* name : {"kernel_shape", "pads", "strides"})
    if (n.has_attr(name)) attrs[name] = n.attrs.at(name);
  std::string dx = g.op("MaxUnpoolGrad", {g.output_grad(0), g.input(1)}, attrs, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "MaxUnpool", kernel_factory<MaxUnpoolKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MaxUnpoolGrad", kernel_factory<MaxUnpoolGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "MaxUnpool", max_unpool_gradient);

}  // namespace onnxtrain
