// Shape and Size: int64 descriptions of a tensor's shape (never differentiable).
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

class ShapeKernel final : public Kernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.node.attr_int("start", 0)), end_(info.node.attr_int("end", INT64_MAX)), has_end_(info.node.has_attr("end")) {}
  void compute(KernelContext& ctx) const override {
    const TensorShape& s = ctx.input(0).shape();
    const int64_t rank = s.rank();
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    int64_t b = clamp(start_), e = has_end_ ? clamp(end_) : rank;
    int64_t n = std::max<int64_t>(0, e - b);
    Tensor& out = ctx.allocate_output(0, DType::Int64, {n});
    for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = s[static_cast<int>(b + i)];
  }

 private:
  int64_t start_, end_;
  bool has_end_;
};

void size(KernelContext& ctx) {
  Tensor& out = ctx.allocate_output(0, DType::Int64, {});
  *out.data<int64_t>() = ctx.input(0).numel();
}

}  // namespace

ONNXTRAIN_KERNEL("", "Shape", kernel_factory<ShapeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Shape", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "Size", kernel_factory(&size), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Size", kBothHalfFloats);

}  // namespace onnxtrain
