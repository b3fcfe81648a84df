// Constant and ConstantOfShape.
#include <cstring>

#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

Tensor constant_value(const Node& n) {
  if (n.has_attr("value")) return n.attrs.at("value").t;
  if (n.has_attr("value_float")) return Tensor::scalar<float>(n.attr_float("value_float", 0));
  if (n.has_attr("value_int")) return Tensor::scalar<int64_t>(n.attr_int("value_int", 0));
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  }
  if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  }
  throw UnsupportedError("Constant needs one of value, value_float(s), value_int(s); sparse and string values "
                         "are not supported");
}

class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) : value_(constant_value(info.node)) {}
  void compute(KernelContext& ctx) const override {
    ctx.allocate_output(0, value_.dtype(), value_.shape()).copy_from(value_);
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) {
    value_ = info.node.has_attr("value") ? info.node.attrs.at("value").t : Tensor::zeros(DType::Float32, {1});
    OT_CHECK(value_.numel() == 1, "the 'value' attribute must hold one element, got ", value_.str());
  }
  void compute(KernelContext& ctx) const override {
    std::vector<int64_t> dims = ctx.input(0).to_int64_vector();
    for (int64_t d : dims) OT_CHECK(d >= 0, "negative dimension ", d, " in the requested shape");
    Tensor& out = ctx.allocate_output(0, value_.dtype(), TensorShape(dims));
    const size_t es = dtype_size(value_.dtype());
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    bool zero = true;
    for (size_t b = 0; b < es; ++b) zero = zero && static_cast<const uint8_t*>(value_.raw_data())[b] == 0;
    if (zero) {
      std::memset(dst, 0, out.nbytes());
      return;
    }
    for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(dst + i * es, value_.raw_data(), es);
  }

 private:
  Tensor value_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Constant", kernel_factory<ConstantKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Constant", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "ConstantOfShape", kernel_factory<ConstantOfShapeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "ConstantOfShape", kBothHalfFloats);

}  // namespace onnxtrain
