#pragma once
// Element types. The numeric values are ONNX's TensorProto.DataType, so conversion is a cast.
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace onnxtrain {

enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
  // onnxtrain's own, beyond ONNX's element types: a value that is a list of tensors (ONNX's
  // sequence, and optional with zero or one element). See Tensor::list.
  Sequence = 1000,
  Optional = 1001,
};
inline bool is_list_kind(DType t) { return t == DType::Sequence || t == DType::Optional; }

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool is_floating(DType t);
inline bool is_16bit_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
bool is_integral(DType t);  // integer types, bool excluded
DType dtype_from_onnx(int32_t onnx_type);  // throws on types onnxtrain cannot hold

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::UInt16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::UInt32; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::UInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

template <typename T> struct TypeTag { using type = T; };

// Calls fn(TypeTag<T>{}) for the C++ type T of `t`; `what` names the caller in the error.
template <typename Fn>
decltype(auto) dispatch_float(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    default: OT_THROW(what, ": element type ", dtype_name(t), " is not supported (float32/float64 only)");
  }
}

// Integer types only (bitwise ops, shifts, integer division).
template <typename Fn>
decltype(auto) dispatch_integer(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Int64: return fn(TypeTag<int64_t>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int16: return fn(TypeTag<int16_t>{});
    case DType::Int8: return fn(TypeTag<int8_t>{});
    case DType::UInt8: return fn(TypeTag<uint8_t>{});
    case DType::UInt16: return fn(TypeTag<uint16_t>{});
    case DType::UInt32: return fn(TypeTag<uint32_t>{});
    case DType::UInt64: return fn(TypeTag<uint64_t>{});
    default: OT_THROW(what, ": element type ", dtype_name(t), " is not supported (integers only)");
  }
}

template <typename Fn>
decltype(auto) dispatch_integer_or_bool(DType t, const char* what, Fn&& fn) {
  if (t == DType::Bool) return fn(TypeTag<bool>{});
  return dispatch_integer(t, what, std::forward<Fn>(fn));
}

template <typename Fn>
decltype(auto) dispatch_numeric(DType t, const char* what, Fn&& fn) {
  if (t == DType::Float32) return fn(TypeTag<float>{});
  if (t == DType::Float64) return fn(TypeTag<double>{});
  if (!is_integral(t)) OT_THROW(what, ": element type ", dtype_name(t), " is not supported");
  return dispatch_integer(t, what, std::forward<Fn>(fn));
}

// Every type a tensor can hold, bool included: for ops that only move data.
template <typename Fn>
decltype(auto) dispatch_all(DType t, const char* what, Fn&& fn) {
  if (t == DType::Bool) return fn(TypeTag<bool>{});
  return dispatch_numeric(t, what, std::forward<Fn>(fn));
}

// Ops that only move elements (a permutation, a copy): calls fn(TypeTag<U>{}) with the unsigned
// integer U as wide as t's element, so every type, float16 and bfloat16 included, moves as bits.
template <typename Fn>
decltype(auto) dispatch_by_width(DType t, const char* what, Fn&& fn) {
  if (t == DType::String || t == DType::Undefined || is_list_kind(t))
    OT_THROW(what, ": element type ", dtype_name(t), " is not supported");
  switch (dtype_size(t)) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    case 8: return fn(TypeTag<uint64_t>{});
    default: OT_THROW(what, ": element type ", dtype_name(t), " is not supported");
  }
}

}  // namespace onnxtrain
