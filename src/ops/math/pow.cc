// Pow(X, Y) with broadcasting and mixed base/exponent types (the output has the base's type),
// and its gradient with respect to both, through PowGrad(dY, X, Y) with attribute input = 0|1.
#include <atomic>

#include "autodiff/grad_builder.h"
#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

// Integer base: exact square-and-multiply (wrapping like numpy) for integer exponents; float
// exponents go through double and truncate, as numpy's power followed by a cast does.
template <typename T, typename E>
T int_pow(T x, E e, bool& out_of_range) {
  if constexpr (std::is_floating_point_v<E>) {
    return float_to_int<T>(std::pow(static_cast<double>(x), static_cast<double>(e)), out_of_range);
  } else {
    if constexpr (std::is_signed_v<E>) {
      if (e < 0) {
        OT_CHECK(x != 0, "Pow: integer zero raised to a negative power");
        if (x == 1) return 1;
        if constexpr (std::is_signed_v<T>)
          if (x == -1) return static_cast<T>((e & 1) ? -1 : 1);
        return 0;
      }
    }
    using U = std::make_unsigned_t<T>;
    U result = 1, base = static_cast<U>(x);
    for (uint64_t k = static_cast<uint64_t>(e); k; k >>= 1) {
      if (k & 1) result = static_cast<U>(result * base);
      base = static_cast<U>(base * base);
    }
    return static_cast<T>(result);
  }
}

template <typename T, typename E>
T power(T x, E e, bool& out_of_range) {
  if constexpr (std::is_floating_point_v<T>) return std::pow(x, static_cast<T>(e));
  else return int_pow(x, e, out_of_range);
}

template <typename Fn>
decltype(auto) dispatch_base(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int64: return fn(TypeTag<int64_t>{});
    default: OT_THROW("Pow: base element type ", dtype_name(t), " is not supported (float32/float64/int32/int64)");
  }
}

// A scalar float exponent of 2, 3, 0.5 or -1 (x^2 in norms, x^3 in tanh-GELU) skips pow, as
// PyTorch's own pow does for these exponents.
template <typename T>
bool pow_scalar_fast(KernelContext& ctx, const T* x, T e, T* y, int64_t n) {
  auto run = [&](auto f) {
    unary_map(ctx.threads(), x, y, n, f);
    return true;
  };
  if (e == T(2)) return run([](T v) { return v * v; });
  if (e == T(3)) return run([](T v) { return v * v * v; });
  if (e == T(0.5)) return run([](T v) { return std::sqrt(v); });
  if (e == T(-1)) return run([](T v) { return T(1) / v; });
  return false;
}

void pow_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& e = ctx.input(1);
  TensorShape shape = broadcast_shapes({x.shape(), e.shape()}, "Pow");
  Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
  dispatch_base(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_numeric(e.dtype(), "Pow exponent", [&](auto etag) {
      using E = typename decltype(etag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        if (e.numel() == 1 && x.shape() == shape &&
            pow_scalar_fast<T>(ctx, x.data<T>(), static_cast<T>(e.data<E>()[0]), out.data<T>(), x.numel()))
          return;
      }
      std::atomic<bool> out_of_range{false};
      binary_broadcast(ctx.threads(), x.data<T>(), x.shape(), e.data<E>(), e.shape(), out.data<T>(), shape,
                       [&out_of_range](T a, E b) {
                         bool bad = false;
                         T r = power(a, b, bad);
                         if (bad) out_of_range.store(true, std::memory_order_relaxed);
                         return r;
                       });
      OT_CHECK(!out_of_range.load(), "Pow: an integer base raised to a float exponent gave NaN, an infinity or a "
               "value out of the range of ", dtype_name(x.dtype()), " (0 to a negative power, say)");
    });
  });
}

// Inputs dY, X, Y (the exponent); output shaped like dY, summed to its input by the rule.
// As PyTorch 1.13: dX = dY * y * x^(y-1), 0 where y == 0; dY_exp = dY * x^y * log(x), 0 where
// x == 0 and y >= 0.
class PowGradKernel final : public Kernel {
 public:
  explicit PowGradKernel(const KernelInfo& info) : input_(grad_input_attr(info, 2, "PowGrad")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& e = ctx.input(2);
    Tensor& out = ctx.allocate_output(0, dy.dtype(), dy.shape());
    dispatch_float(dy.dtype(), "PowGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      OT_CHECK(x.dtype() == dy.dtype(), "PowGrad: base ", x.str(), " and gradient ", dy.str(), " differ in type");
      dispatch_numeric(e.dtype(), "PowGrad exponent", [&](auto etag) {
        using E = typename decltype(etag)::type;
        const T* pdy = dy.data<T>();
        T* po = out.data<T>();
        if (input_ == 0) {
          ternary_broadcast(ctx.threads(), pdy, dy.shape(), x.data<T>(), x.shape(), e.data<E>(), e.shape(), po,
                            dy.shape(), [](T g, T b, E p) {
                              const T pt = static_cast<T>(p);
                              if (pt == T(0)) return T(0);
                              if (pt == T(2)) return g * T(2) * b;
                              if (pt == T(3)) return g * T(3) * (b * b);
                              return g * pt * std::pow(b, pt - T(1));
                            });
        } else {
          if constexpr (std::is_floating_point_v<E>) {
            ternary_broadcast(ctx.threads(), pdy, dy.shape(), x.data<T>(), x.shape(), e.data<E>(), e.shape(), po,
                              dy.shape(), [](T g, T b, E p) {
                                const T pt = static_cast<T>(p);
                                if (b == T(0) && pt >= T(0)) return T(0);
                                return g * std::pow(b, pt) * std::log(b);
                              });
          } else {
            OT_THROW("PowGrad: the exponent ", e.str(), " is not a float, it has no gradient");
          }
        }
      });
    });
  }

 private:
  int input_;
};

void pow_gradient(GradBuilder& g) {
  for (int i = 0; i < 2; ++i) {
    if (!g.needs_input_grad(i)) continue;
    std::string d = g.op("PowGrad", {g.output_grad(0), g.input(0), g.input(1)}, {{"input", Attribute::of_int(i)}},
                         kOnnxTrainDomain);
    // A float exponent of another float type than the base: PowGrad computes in the base's.
    DType want = g.dtype_of(g.input(i));
    if (want != g.dtype_of(g.output(0))) d = g.op("Cast", {d}, {{"to", Attribute::of_int(static_cast<int64_t>(want))}});
    g.set_input_grad(i, g.reduce_to_input_shape(d, i));
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "Pow", kernel_factory(&pow_kernel), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "PowGrad", kernel_factory<PowGradKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Pow", pow_gradient);

}  // namespace onnxtrain
