// Boolean logic (Not, And, Or, Xor, with broadcasting) and the float classifiers IsNaN and
// IsInf (detect_positive / detect_negative). Bool outputs, forward only.
#include <cmath>

#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

void check_bool(const Tensor& t, const char* what) {
  OT_CHECK(t.dtype() == DType::Bool, what, ": inputs must be bool, got ", t.str());
}

void logical_not(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  check_bool(x, "Not");
  Tensor& y = ctx.allocate_output(0, DType::Bool, x.shape());
  unary_map(ctx.threads(), x.data<bool>(), y.data<bool>(), x.numel(), [](bool v) { return !v; });
}

template <typename Op>
void logical_binary(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  check_bool(a, Op::kName);
  check_bool(b, Op::kName);
  TensorShape shape = broadcast_shapes({a.shape(), b.shape()}, Op::kName);
  Tensor& out = ctx.allocate_output(0, DType::Bool, shape);
  binary_broadcast(ctx.threads(), a.data<bool>(), a.shape(), b.data<bool>(), b.shape(), out.data<bool>(), shape,
                   [](bool x, bool y) { return Op::apply(x, y); });
}

struct And {
  static constexpr const char* kName = "And";
  static bool apply(bool a, bool b) { return a && b; }
};
struct Or {
  static constexpr const char* kName = "Or";
  static bool apply(bool a, bool b) { return a || b; }
};
struct Xor {
  static constexpr const char* kName = "Xor";
  static bool apply(bool a, bool b) { return a != b; }
};

// Calls fn(x as float or double) over a float tensor of any width; the 16-bit floats widen
// exactly to float, which keeps NaN and infinity.
template <typename Fn>
void classify(KernelContext& ctx, const char* what, Fn fn) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, DType::Bool, x.shape());
  bool* o = y.data<bool>();
  switch (x.dtype()) {
    case DType::Float32: unary_map(ctx.threads(), x.data<float>(), o, x.numel(), fn); break;
    case DType::Float64: unary_map(ctx.threads(), x.data<double>(), o, x.numel(), fn); break;
    case DType::Float16:
      unary_map(ctx.threads(), x.data<Half>(), o, x.numel(), [fn](Half v) { return fn(half_to_float(v)); });
      break;
    case DType::BFloat16:
      unary_map(ctx.threads(), x.data<BHalf>(), o, x.numel(), [fn](BHalf v) { return fn(bfloat16_to_float(v)); });
      break;
    default: OT_THROW(what, ": element type ", dtype_name(x.dtype()), " is not supported (float types only)");
  }
}

void is_nan(KernelContext& ctx) {
  classify(ctx, "IsNaN", [](auto v) { return v != v; });
}

class IsInfKernel final : public Kernel {
 public:
  explicit IsInfKernel(const KernelInfo& info)
      : positive_(info.node.attr_int("detect_positive", 1) != 0),
        negative_(info.node.attr_int("detect_negative", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const bool pos = positive_, neg = negative_;
    classify(ctx, "IsInf", [pos, neg](auto v) {
      return std::isinf(v) && (v > 0 ? pos : neg);
    });
  }

 private:
  bool positive_, negative_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Not", kernel_factory(&logical_not), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "And", kernel_factory(&logical_binary<And>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Or", kernel_factory(&logical_binary<Or>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Xor", kernel_factory(&logical_binary<Xor>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "IsNaN", kernel_factory(&is_nan), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "IsNaN", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "IsInf", kernel_factory<IsInfKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "IsInf", kBothHalfFloats);

}  // namespace onnxtrain
