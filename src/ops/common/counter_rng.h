#pragma once
// The engine's counter-based random bits: element i of a run's stream is a hash of (key, i), so no
// generator state passes from element to element. Every element is independent of the thread
// split, and loops over elements vectorize (32-bit multiplies and shifts only). Dropout's masks
// and the random ops (src/ops/random) draw from it, keyed by KernelContext::random_seed().
#include <cstdint>

namespace onnxtrain::rng {

// A 32-bit avalanche mix (bijective; every input bit reaches every output bit).
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Two keyed rounds: with one round, two keys would give the same sequence shifted by an offset.
inline uint32_t bits(uint32_t i, uint32_t k0, uint32_t k1) { return mix32(mix32(i * 0x9E3779B9U + k0) ^ k1); }

// Elements per block: blocks are aligned, so the high half of a 64-bit index is constant in one.
inline constexpr int64_t kBlock = 4096;

struct Key {
  uint32_t k0, k1;
};

inline Key key_of(uint64_t seed) { return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}; }

// The key for the aligned block that starts at element b: the index's high half joins the key.
inline Key block_key(const Key& key, int64_t b) {
  const uint32_t hi = static_cast<uint32_t>(static_cast<uint64_t>(b) >> 32);
  return {key.k0, hi == 0 ? key.k1 : key.k1 ^ mix32(hi + 0x632be5abU)};
}

// A uniform double in [0, 1) from 32 random bits.
inline double unit(uint32_t b) { return static_cast<double>(b) * (1.0 / 4294967296.0); }

}  // namespace onnxtrain::rng
