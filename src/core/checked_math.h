#pragma once
// Size arithmetic on values a model or its inputs control (target shapes, repeats, pads, Range
// bounds): a result that does not fit in int64 is an error naming the op, not a wrapped number
// that a later check cannot see.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace onnxtrain {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  OT_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " * ", b, " overflows a 64-bit size");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  OT_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows a 64-bit size");
  return r;
}

inline int64_t checked_sub(int64_t a, int64_t b, const char* what) {
  int64_t r;
  OT_CHECK(!__builtin_sub_overflow(a, b, &r), what, ": ", a, " - ", b, " overflows a 64-bit size");
  return r;
}

// Float to integer, where C++ leaves NaN, infinities and values out of the target's range
// undefined: those give 0 and set `out_of_range`, for the kernel to report after its loop (the
// loop may run on the thread pool, where it cannot throw).
template <typename To, typename From>
To float_to_int(From v, bool& out_of_range) {
  static_assert(std::is_integral_v<To> && std::is_floating_point_v<From>);
  // Both bounds are powers of two, exact in any float type: [min, max + 1).
  constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
  constexpr double hi = 2.0 * static_cast<double>(std::numeric_limits<To>::max() / 2 + 1);
  const double d = static_cast<double>(v);
  if (d >= lo && d < hi) return static_cast<To>(v);
  out_of_range = true;
  return To(0);
}

// Float to a signed integer (or uint8/uint16) as PyTorch converts on x86 CPUs, where its result is
// defined by the conversion instruction: int64 and int32 give their minimum for NaN, infinities
// and values out of range ("integer indefinite"); the narrower types convert through int32 and
// keep its low bits (-1.0 to uint8 is 255, 70000.0 to int16 is 4464). Models rely on it: T5's
// relative position buckets cast log(0) = -inf to int64 before a where() discards it. uint32 and
// uint64 have no such torch reference and stay checked (float_to_int).
template <typename To, typename From>
To float_to_int_like_torch(From v) {
  static_assert(std::is_integral_v<To> && std::is_floating_point_v<From> && std::is_signed_v<From>);
  static_assert(sizeof(To) <= 2 || std::is_signed_v<To>, "uint32 and uint64 are converted checked");
  using Wide = std::conditional_t<sizeof(To) == 8, int64_t, int32_t>;
  constexpr double lo = static_cast<double>(std::numeric_limits<Wide>::min());
  constexpr double hi = 2.0 * static_cast<double>(std::numeric_limits<Wide>::max() / 2 + 1);
  const double d = static_cast<double>(v);
  const Wide wide = d >= lo && d < hi ? static_cast<Wide>(d) : std::numeric_limits<Wide>::min();
  return static_cast<To>(wide);  // modular for the narrow types
}

}  // namespace onnxtrain
