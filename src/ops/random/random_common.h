#pragma once
// What the random ops share: the run's key (ctx.random_seed(), which ORTModule draws from torch's
// RNG, varied by a `seed` attribute as Dropout's is: runs still differ), draws addressed by a
// 64-bit element index, and stores into every floating output type.
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "opdef/kernel.h"
#include "ops/common/counter_rng.h"

namespace onnxtrain::rng {

struct SeedAttr {
  bool given = false;
  double value = 0;
};

inline SeedAttr seed_attr(const Node& node) { return {node.has_attr("seed"), node.attr_float("seed", 0.0f)}; }

inline Key run_key(const KernelContext& ctx, const SeedAttr& attr) {
  uint64_t seed = ctx.random_seed();
  if (attr.given) seed ^= static_cast<uint64_t>(std::llround(attr.value)) * 0xD1B54A32D192ED03ULL;
  return key_of(seed);
}

// 32 random bits for element i of stream `stream` (0, 1, ...: independent streams of one key).
inline uint32_t draw(const Key& key, int64_t i, uint32_t stream = 0) {
  const Key k = block_key(key, i);
  return bits(static_cast<uint32_t>(i), k.k0, stream == 0 ? k.k1 : k.k1 ^ mix32(stream * 0x85ebca6bU));
}

// Significant bits of T's uniform draws: a draw of that many bits is exact in T, so scaling into
// [0, 1) can never round up to 1.
template <typename T> constexpr int uniform_bits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  else if constexpr (std::is_same_v<T, BHalf>) return 8;
  else if constexpr (std::is_same_v<T, float>) return 24;
  else return 32;
}

template <typename T> double unit_for(uint32_t b) {
  constexpr int kBits = uniform_bits<T>();
  return static_cast<double>(b >> (32 - kBits)) * std::ldexp(1.0, -kBits);
}

// A standard normal draw (Box-Muller on two 32-bit draws; u1 in (0, 1) so the log is finite).
inline double normal(const Key& key, int64_t i) {
  const double u1 = (static_cast<double>(draw(key, i, 0)) + 0.5) * (1.0 / 4294967296.0);
  const double u2 = unit(draw(key, i, 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

template <typename T> T store(double v) {
  if constexpr (std::is_same_v<T, Half>) return double_to_half(v);
  else if constexpr (std::is_same_v<T, BHalf>) return double_to_bfloat16(v);
  else return static_cast<T>(v);
}

template <typename T> double load(T v) {
  if constexpr (std::is_same_v<T, Half>) return half_to_double(v);
  else if constexpr (std::is_same_v<T, BHalf>) return bfloat16_to_double(v);
  else return static_cast<double>(v);
}

// Random ops write float16, bfloat16, float and double.
template <typename Fn>
decltype(auto) dispatch_random_float(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Float16: return fn(TypeTag<Half>{});
    case DType::BFloat16: return fn(TypeTag<BHalf>{});
    default: OT_THROW(what, ": element type ", dtype_name(t), " is not supported (floating types only)");
  }
}

}  // namespace onnxtrain::rng
