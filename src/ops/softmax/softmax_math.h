#pragma once
// Building blocks of the softmax-shaped kernels (Softmax, LogSoftmax, their gradients, the
// cross-entropy loss): a vectorizable exp and row folds with independent lane accumulators.
// GCC does not vectorize a float sum or max reduction without -ffast-math, but it does
// vectorize these lane loops, and std::exp in a loop stays scalar (10x slower than vexp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/common/reduce.h"
#include "runtime/thread_pool.h"

namespace onnxtrain::softmax_math {

inline constexpr int64_t kLanes = 64;
inline constexpr int64_t kGrain = 1 << 14;  // elements per parallel task, at least
inline constexpr int64_t kCols = 64;        // column block when the axis is not the innermost

// exp(x) for float: 2^n exp(r) with n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by Cephes'
// degree-6 polynomial: within 1 ulp. Results below the smallest normal float are 0 (exact
// exp(-inf) = 0 included: masked attention scores), arguments above 88 saturate near 1.7e38
// (callers pass x - max <= 0), NaN stays NaN. Branch-free, so loops over it vectorize.
inline float vexp(float x) {
  const float lo = -87.33654f, hi = 88.0f;
  float c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  // Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits: n without a
  // float-to-int conversion.
  const float shifter = 12582912.0f;
  const float t = c * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = c - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - 0x4B400000u + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < lo ? 0.0f : p * scale;
}

// float64 is for gradient checks and careful users: full libm accuracy.
inline double vexp(double x) { return std::exp(x); }

// Sum of f(k) for k < n.
template <typename T, typename F>
T sum_lanes(int64_t n, const F& f) {
  T lanes[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += f(k + j);
  T s = 0;
  for (; k < n; ++k) s += f(k);
  for (int64_t j = 0; j < kLanes; ++j) s += lanes[j];
  return s;
}

// Maximum of x[0..n), n >= 1; NaN is skipped unless every value is NaN (the NaN then shows up
// in the exp pass anyway).
template <typename T>
T max_lanes(const T* x, int64_t n) {
  T m = x[0];
  int64_t k = 0;
  if (n >= kLanes) {
    T lanes[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[j];
    for (k = kLanes; k + kLanes <= n; k += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) {
        const T a = lanes[j], b = x[k + j];
        lanes[j] = b > a ? b : a;
      }
    for (int64_t j = 0; j < kLanes; ++j) m = lanes[j] > m ? lanes[j] : m;
  }
  for (; k < n; ++k) m = x[k] > m ? x[k] : m;
  return m;
}

// Over the [outer, n, inner] layout of an along-an-axis op: row(o) for every contiguous row when
// inner == 1, else block(o, c0, width) for every block of up to kCols columns; split across
// the pool. A block processes its columns side by side, so its loops vectorize across columns.
template <typename Row, typename Block>
void for_each_slice(ThreadPool& pool, const AxisSplit& s, const Row& row, const Block& block) {
  if (s.n == 0 || s.outer == 0 || s.inner == 0) return;
  if (s.inner == 1) {
    pool.parallel_for(s.outer, std::max<int64_t>(1, kGrain / s.n), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) row(o);
    });
    return;
  }
  const int64_t blocks = (s.inner + kCols - 1) / kCols;
  pool.parallel_for(s.outer * blocks, std::max<int64_t>(1, kGrain / (s.n * std::min(s.inner, kCols))),
                    [&](int64_t t0, int64_t t1) {
                      for (int64_t t = t0; t < t1; ++t) {
                        const int64_t o = t / blocks, c0 = (t % blocks) * kCols;
                        block(o, c0, std::min(s.inner, c0 + kCols) - c0);
                      }
                    });
}

}  // namespace onnxtrain::softmax_math
