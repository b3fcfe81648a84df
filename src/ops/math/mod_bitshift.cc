// Mod (fmod = 0: the result takes the divisor's sign, like Python and numpy.mod; fmod = 1: the
// dividend's, like C's fmod) and BitShift on unsigned integers. Both broadcast. Mod's gradient
// reaches the dividend only (ONNX marks the divisor non-differentiable): dA = dY, as PyTorch's
// remainder and fmod backward.
#include "autodiff/grad_builder.h"
#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/common/shift_direction.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

template <typename T>
T int_mod(T a, T b, bool c_style) {
  OT_CHECK(b != 0, "Mod: integer division by zero");
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;  // also avoids the overflow of INT_MIN % -1
    T r = static_cast<T>(a % b);
    if (!c_style && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}

template <typename T>
T float_mod(T a, T b, bool c_style) {
  T r = std::fmod(a, b);
  if (!c_style) {
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    else if (r == 0) r = std::copysign(T(0), b);
  }
  return r;
}

class ModKernel final : public Kernel {
 public:
  explicit ModKernel(const KernelInfo& info) : c_style_(info.node.attr_int("fmod", 0) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    OT_CHECK(a.dtype() == b.dtype(), "Mod: inputs have different element types: ", a.str(), " and ", b.str());
    TensorShape shape = broadcast_shapes({a.shape(), b.shape()}, "Mod");
    Tensor& out = ctx.allocate_output(0, a.dtype(), shape);
    const bool c_style = c_style_;
    if (a.dtype() == DType::Float16) {
      // The remainder is exact in float and representable in float16 again.
      binary_broadcast(ctx.threads(), a.data<Half>(), a.shape(), b.data<Half>(), b.shape(), out.data<Half>(), shape,
                       [c_style](Half x, Half y) {
                         return float_to_half(float_mod(half_to_float(x), half_to_float(y), c_style));
                       });
      return;
    }
    dispatch_numeric(a.dtype(), "Mod", [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_broadcast(ctx.threads(), a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<T>(), shape,
                       [c_style](T x, T y) {
                         if constexpr (std::is_floating_point_v<T>) return float_mod(x, y, c_style);
                         else return int_mod(x, y, c_style);
                       });
    });
  }

 private:
  bool c_style_;
};

template <typename Fn>
decltype(auto) dispatch_unsigned(DType t, Fn&& fn) {
  switch (t) {
    case DType::UInt8: return fn(TypeTag<uint8_t>{});
    case DType::UInt16: return fn(TypeTag<uint16_t>{});
    case DType::UInt32: return fn(TypeTag<uint32_t>{});
    case DType::UInt64: return fn(TypeTag<uint64_t>{});
    default: OT_THROW("BitShift: element type ", dtype_name(t), " is not supported (unsigned integers only)");
  }
}

class BitShiftKernel final : public Kernel {
 public:
  explicit BitShiftKernel(const KernelInfo& info) : left_(shifts_left(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& s = ctx.input(1);
    OT_CHECK(x.dtype() == s.dtype(), "BitShift: inputs have different element types: ", x.str(), " and ", s.str());
    TensorShape shape = broadcast_shapes({x.shape(), s.shape()}, "BitShift");
    Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
    const bool left = left_;
    dispatch_unsigned(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      // Shifting by the width or more is undefined in C++; every bit is shifted out, so 0.
      constexpr T kBits = static_cast<T>(sizeof(T) * 8);
      binary_broadcast(ctx.threads(), x.data<T>(), x.shape(), s.data<T>(), s.shape(), out.data<T>(), shape,
                       [left](T v, T n) {
                         if (n >= kBits) return T(0);
                         const uint64_t w = v;  // no promotion to (signed) int
                         return static_cast<T>(left ? w << n : w >> n);
                       });
    });
  }

 private:
  bool left_;
};

void mod_gradient(GradBuilder& g) {
  if (g.needs_input_grad(0)) g.set_input_grad(0, g.reduce_to_input_shape(g.output_grad(0), 0));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Mod", kernel_factory<ModKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Mod", mod_gradient);
ONNXTRAIN_KERNEL("", "BitShift", kernel_factory<BitShiftKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
