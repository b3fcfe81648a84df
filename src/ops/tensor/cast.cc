// Cast and CastLike between numeric, bool, float16 and bfloat16 types; gradients cast back to the
// input's float type. String tensors cannot be held by onnxtrain (dtype_from_onnx rejects them).
#include <atomic>

#include "autodiff/grad_builder.h"
#include "core/checked_math.h"
#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BHalf>;

// The 16-bit floats widen exactly to float, so every conversion out of them goes through float,
// except to double, which must not pass a bfloat16 subnormal through the FPU (DAZ).
template <typename From, typename To>
To convert(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    if constexpr (std::is_same_v<To, double>) return half_to_double(v);
    else return convert<float, To>(half_to_float(v));
  } else if constexpr (std::is_same_v<From, BHalf>) {
    if constexpr (std::is_same_v<To, double>) return bfloat16_to_double(v);
    else return convert<float, To>(bfloat16_to_float(v));
  } else if constexpr (std::is_same_v<To, Half>) {
    // One rounding: floats narrow directly; integers and bool are exact in double first.
    if constexpr (std::is_same_v<From, float>) return float_to_half(v);
    else return double_to_half(static_cast<double>(v));
  } else if constexpr (std::is_same_v<To, BHalf>) {
    if constexpr (std::is_same_v<From, float>) return float_to_bfloat16(v);
    else return double_to_bfloat16(static_cast<double>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Float to integer: NaN, infinities and out-of-range values give what PyTorch gives on this CPU
// (float_to_int_like_torch), where it has a reference; to uint32 and uint64 they are refused
// (C++ leaves them undefined).
template <typename From, typename To>
To convert_checked(From v, std::atomic<bool>& out_of_range) {
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && std::is_floating_point_v<From>) {
    if constexpr (sizeof(To) <= 2 || std::is_signed_v<To>) return float_to_int_like_torch<To>(v);
    bool bad = false;
    To r = float_to_int<To>(v, bad);
    if (bad) out_of_range.store(true, std::memory_order_relaxed);
    return r;
  } else if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && kIsHalf<From>) {
    return convert_checked<float, To>(convert<From, float>(v), out_of_range);
  } else {
    return convert<From, To>(v);
  }
}

template <typename Fn>
decltype(auto) dispatch_castable(DType t, const char* what, Fn&& fn) {
  if (t == DType::Float16) return fn(TypeTag<Half>{});
  if (t == DType::BFloat16) return fn(TypeTag<BHalf>{});
  return dispatch_all(t, what, std::forward<Fn>(fn));
}

void cast_to(KernelContext& ctx, const char* what, DType to) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == to) {
    ctx.alias_input(0, 0, x.shape());
    return;
  }
  Tensor& y = ctx.allocate_output(0, to, x.shape());
  dispatch_castable(x.dtype(), what, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_castable(to, what, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      std::atomic<bool> out_of_range{false};
      unary_map(ctx.threads(), x.data<From>(), y.data<To>(), x.numel(),
                [&out_of_range](From v) { return convert_checked<From, To>(v, out_of_range); });
      OT_CHECK(!out_of_range.load(), what, ": a NaN, infinite or out-of-range ", dtype_name(x.dtype()),
               " value cannot convert to ", dtype_name(to));
    });
  });
}

DType parse_to(const KernelInfo& info) {
  OT_CHECK(info.node.has_attr("to"), "Cast needs the attribute 'to'");
  const Attribute& a = info.node.attrs.at("to");
  if (a.kind != Attribute::Kind::String) return dtype_from_onnx(static_cast<int32_t>(a.i));
  // Cast-1 names the type as a string.
  static const std::pair<const char*, DType> kNames[] = {
      {"FLOAT", DType::Float32}, {"UINT8", DType::UInt8},     {"INT8", DType::Int8},     {"UINT16", DType::UInt16},
      {"INT16", DType::Int16},   {"INT32", DType::Int32},     {"INT64", DType::Int64},   {"BOOL", DType::Bool},
      {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Float64}, {"UINT32", DType::UInt32}, {"UINT64", DType::UInt64},
      {"BFLOAT16", DType::BFloat16}};
  for (const auto& [name, dt] : kNames)
    if (a.s == name) return dt;
  throw UnsupportedError(str_cat("Cast: target type '", a.s, "' is not supported"));
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelInfo& info) : to_(parse_to(info)) {}
  void compute(KernelContext& ctx) const override { cast_to(ctx, "Cast", to_); }

 private:
  DType to_;
};

// CastLike(input, target_type): the target's element type, read at run time like any input.
void cast_like(KernelContext& ctx) { cast_to(ctx, "CastLike", ctx.input(1).dtype()); }

// Shared by both: the gradient flows back in the input's own type (target_type has none).
void cast_gradient(GradBuilder& g) {
  DType in = g.dtype_of(g.input(0));
  g.set_input_grad(0, g.op("Cast", {g.output_grad(0)}, {{"to", Attribute::of_int(static_cast<int64_t>(in))}}));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Cast", kernel_factory<CastKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Cast", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "CastLike", kernel_factory(&cast_like), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "CastLike", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Cast", cast_gradient);
ONNXTRAIN_GRADIENT("", "CastLike", cast_gradient);

}  // namespace onnxtrain
