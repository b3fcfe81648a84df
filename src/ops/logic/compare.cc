// Comparisons with broadcasting: Equal, Less, Greater, LessOrEqual, GreaterOrEqual. Bool
// outputs; no gradients (their outputs are not differentiable).
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

template <typename Cmp>
void compare(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OT_CHECK(a.dtype() == b.dtype(), Cmp::kName, ": inputs have different element types: ", a.str(), " and ", b.str());
  TensorShape shape = broadcast_shapes({a.shape(), b.shape()}, Cmp::kName);
  Tensor& out = ctx.allocate_output(0, DType::Bool, shape);
  dispatch_all(a.dtype(), Cmp::kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_broadcast(ctx.threads(), a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<bool>(), shape,
                     [](T x, T y) { return Cmp::apply(x, y); });
  });
}

struct Equal {
  static constexpr const char* kName = "Equal";
  template <typename T> static bool apply(T a, T b) { return a == b; }
};
struct Less {
  static constexpr const char* kName = "Less";
  template <typename T> static bool apply(T a, T b) { return a < b; }
};
struct Greater {
  static constexpr const char* kName = "Greater";
  template <typename T> static bool apply(T a, T b) { return a > b; }
};
struct LessOrEqual {
  static constexpr const char* kName = "LessOrEqual";
  template <typename T> static bool apply(T a, T b) { return a <= b; }
};
struct GreaterOrEqual {
  static constexpr const char* kName = "GreaterOrEqual";
  template <typename T> static bool apply(T a, T b) { return a >= b; }
};

}  // namespace

ONNXTRAIN_KERNEL("", "Equal", kernel_factory(&compare<Equal>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Less", kernel_factory(&compare<Less>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Greater", kernel_factory(&compare<Greater>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "LessOrEqual", kernel_factory(&compare<LessOrEqual>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "GreaterOrEqual", kernel_factory(&compare<GreaterOrEqual>), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
