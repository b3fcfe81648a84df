#pragma once
// float16 (IEEE binary16) and bfloat16 element types, held as their bits.
//
// Conversions are integer-only on purpose: runs execute with denormals flushed to zero (MXCSR
// FTZ/DAZ, see runtime/thread_pool.h), and float arithmetic would lose the narrow formats'
// subnormals. Narrowing rounds to nearest, ties to even, straight from the source format (double
// goes to float16 in one rounding, not through float). NaN stays NaN (quieted, payload kept where
// it fits), infinities stay infinite, values past the largest finite one become infinite.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

namespace onnxtrain {

struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};
template <> struct DTypeOf<Half> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<BHalf> { static constexpr DType value = DType::BFloat16; };

namespace half_detail {

inline int bit_length(uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); }

// Rounds an IEEE value of the source format (SrcExp exponent bits, SrcMant mantissa bits, given
// as its bits widened to 64) to a 16-bit format with DstExp/DstMant bits.
template <int SrcExp, int SrcMant, int DstExp, int DstMant>
uint16_t narrow(uint64_t bits) {
  constexpr int kSrcBias = (1 << (SrcExp - 1)) - 1;
  constexpr int kDstBias = (1 << (DstExp - 1)) - 1;
  constexpr uint64_t kSrcExpMax = (uint64_t{1} << SrcExp) - 1;
  constexpr uint32_t kDstExpMax = (1u << DstExp) - 1;
  const uint32_t sign = static_cast<uint32_t>(bits >> (SrcExp + SrcMant)) & 1u;
  const uint16_t sign_bits = static_cast<uint16_t>(sign << 15);
  const uint64_t exp = (bits >> SrcMant) & kSrcExpMax;
  const uint64_t mant = bits & ((uint64_t{1} << SrcMant) - 1);
  if (exp == kSrcExpMax) {
    if (mant == 0) return static_cast<uint16_t>(sign_bits | (kDstExpMax << DstMant));
    // NaN: keep the top payload bits and set the quiet bit, so it can never read as infinity.
    uint32_t payload = static_cast<uint32_t>(mant >> (SrcMant - DstMant)) | (1u << (DstMant - 1));
    return static_cast<uint16_t>(sign_bits | (kDstExpMax << DstMant) | payload);
  }
  if (exp == 0 && mant == 0) return sign_bits;
  // value = sig * 2^e2 exactly.
  uint64_t sig = exp == 0 ? mant : (mant | (uint64_t{1} << SrcMant));
  int e2 = (exp == 0 ? 1 : static_cast<int>(exp)) - kSrcBias - SrcMant;
  int top = e2 + bit_length(sig) - 1;  // floor(log2(value))
  // Exponent of the destination's last mantissa bit at this magnitude (subnormals share the
  // smallest normal exponent).
  int quantum = (top < 1 - kDstBias ? 1 - kDstBias : top) - DstMant;
  int shift = quantum - e2;
  uint64_t rounded;
  if (shift <= 0) {
    rounded = sig << -shift;  // not reached for our (wider) sources, kept for completeness
  } else if (shift > 63) {
    rounded = 0;  // far below half the smallest subnormal
  } else {
    rounded = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t halfway = uint64_t{1} << (shift - 1);
    if (rem > halfway || (rem == halfway && (rounded & 1))) ++rounded;
  }
  if (rounded >> (DstMant + 1)) {  // rounding carried into a new binade
    rounded >>= 1;
    ++quantum;
  }
  uint32_t biased = 0, frac = static_cast<uint32_t>(rounded);
  if (rounded >> DstMant) {
    biased = static_cast<uint32_t>(quantum + DstMant + kDstBias);
    frac = static_cast<uint32_t>(rounded & ((uint64_t{1} << DstMant) - 1));
  }
  if (biased >= kDstExpMax) return static_cast<uint16_t>(sign_bits | (kDstExpMax << DstMant));
  return static_cast<uint16_t>(sign_bits | (biased << DstMant) | frac);
}

// Widens a 16-bit format to float bits (always exact: float has more range and precision).
template <int Exp, int Mant>
uint32_t widen_to_float_bits(uint16_t h) {
  constexpr int kBias = (1 << (Exp - 1)) - 1;
  constexpr uint32_t kExpMax = (1u << Exp) - 1;
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  uint32_t exp = (h >> Mant) & kExpMax;
  uint32_t mant = h & ((1u << Mant) - 1);
  if (exp == kExpMax) return sign | 0x7f800000u | (mant << (23 - Mant));
  if (exp == 0) {
    if (mant == 0) return sign;
    if (kBias == 127) return sign | (mant << (23 - Mant));  // bfloat16 subnormal: float subnormal
    // float16 subnormal: mant * 2^(1 - bias - Mant), normal in float.
    int lead = bit_length(mant) - 1;
    int e = lead + 1 - kBias - Mant;
    mant = (mant << (Mant - lead)) & ((1u << Mant) - 1);
    return sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << (23 - Mant));
  }
  return sign | ((exp - kBias + 127) << 23) | (mant << (23 - Mant));
}

inline uint64_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline uint64_t double_bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
inline float float_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace half_detail

inline Half float_to_half(float f) { return {half_detail::narrow<8, 23, 5, 10>(half_detail::float_bits(f))}; }
inline Half double_to_half(double d) { return {half_detail::narrow<11, 52, 5, 10>(half_detail::double_bits(d))}; }
// bfloat16 is float32's top half, so rounding to nearest even is one add on the bits (subnormals
// and the carry into infinity included); a NaN keeps its top payload bits and gets the quiet bit,
// as narrow<> gives. Branch-free, so loops over it vectorize.
inline BHalf float_to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return {static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}
inline BHalf double_to_bfloat16(double d) { return {half_detail::narrow<11, 52, 8, 7>(half_detail::double_bits(d))}; }

inline float half_to_float(Half h) { return half_detail::float_from_bits(half_detail::widen_to_float_bits<5, 10>(h.bits)); }
inline float bfloat16_to_float(BHalf h) { return half_detail::float_from_bits(uint32_t{h.bits} << 16); }

// To double without passing a float subnormal through the FPU (DAZ would zero it).
// By type, for code templated on a 16-bit storage type: widened_to_float(Half or BHalf), and
// rounded_from_float<Half or BHalf>(float).
inline float widened_to_float(Half h) { return half_to_float(h); }
inline float widened_to_float(BHalf h) { return bfloat16_to_float(h); }
template <typename T>
T rounded_from_float(float f);
template <>
inline Half rounded_from_float<Half>(float f) { return float_to_half(f); }
template <>
inline BHalf rounded_from_float<BHalf>(float f) { return float_to_bfloat16(f); }

// For kernels templated on a storage type S (float, double, Half, BHalf): the type a value stored
// as S is computed in, widened_from(v) to read it, rounded_to<S>(v) to write it once. Identities
// for float and double, so one loop serves all four.
template <typename S>
inline constexpr bool kIs16BitFloat = std::is_same_v<S, Half> || std::is_same_v<S, BHalf>;
template <typename S>
using ComputeType = std::conditional_t<kIs16BitFloat<S>, float, S>;
template <typename S>
ComputeType<S> widened_from(S v) {
  if constexpr (kIs16BitFloat<S>) return widened_to_float(v);
  else return v;
}
template <typename S>
S rounded_to(ComputeType<S> v) {
  if constexpr (kIs16BitFloat<S>) return rounded_from_float<S>(v);
  else return v;
}

inline double half_to_double(Half h) { return static_cast<double>(half_to_float(h)); }
inline double bfloat16_to_double(BHalf h) {
  if ((h.bits & 0x7f80) == 0 && (h.bits & 0x7f) != 0) {
    double v = static_cast<double>(h.bits & 0x7f) * 0x1p-133;
    return (h.bits & 0x8000) ? -v : v;
  }
  return static_cast<double>(bfloat16_to_float(h));
}

}  // namespace onnxtrain
