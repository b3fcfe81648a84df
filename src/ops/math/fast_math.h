#pragma once
// Vectorized float32 exp, erf, tanh and sigmoid: the transcendental ops on every training step
// (GELU and SiLU reach us decomposed into Erf, Tanh, Sigmoid). libm's scalar calls do not
// vectorize, so these are written branch-free over 8 lanes with GCC vector extensions, which
// compile to whatever -march allows (AVX2/AVX-512, or pairs of SSE ops).
//
// Accuracy (checked against double-precision libm over dense samples, tests/cpp/test_fast_math.cc):
// exp within 1.0 ulp of the correctly rounded value, erf and tanh within 1.5, sigmoid within 2.5;
// NaN propagated, +-inf and overflow/underflow as libm.
// Polynomials are least-squares-minimax fits of the relative error, made for this file.
#include <cstring>

#include "ops/common/elementwise.h"

namespace onnxtrain::fast {

typedef float VF __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
typedef uint32_t VU __attribute__((vector_size(32)));
inline constexpr int kLanes = 8;

inline VF splat(float v) { return VF{} + v; }
inline VF vabs(VF x) { return (VF)((VU)x & 0x7fffffffu); }
// |magnitude| with the sign of `sign`.
inline VF copysign(VF magnitude, VF sign) {
  return (VF)(((VU)magnitude & 0x7fffffffu) | ((VU)sign & 0x80000000u));
}

inline VF exp(VF x) {
  // exp(x) = 2^n * e^r, n = round(x / ln2), |r| <= ln2 / 2 (Cody-Waite split of ln2).
  // Clamping keeps n in range: e^89 overflows and e^-104 underflows to 0 anyway.
  x = x > 89.0f ? splat(89.0f) : x;
  x = x < -104.0f ? splat(-104.0f) : x;  // NaN fails both comparisons and stays NaN
  const VF magic = splat(12582912.0f);    // 1.5 * 2^23: adding it rounds to an integer
  VF n = (x * 1.44269504088896341f + magic) - magic;
  VF r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VF p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  VF y = p * (r * r) + r + 1.0f;
  // Scale by 2^n in two exact steps so that results near overflow and subnormal results come
  // out right (2^n alone is not a normal float for n = 128 or n < -126).
  VI ni = __builtin_convertvector(n, VI);
  VI n1 = ni >> 1;
  VI n2 = ni - n1;
  VF s1 = (VF)((VU)(n1 + 127) << 23u);
  VF s2 = (VF)((VU)(n2 + 127) << 23u);
  y = y * s1 * s2;
  return x != x ? x : y;
}

inline VF erf(VF x) {
  const VF ax = vabs(x);
  const VF x2 = x * x;
  // |x| <= 1: erf(x) = x * P(x^2), evaluated as x + x * (P - 1) so that the rounding of the
  // polynomial touches only its small correction.
  VF pa = splat(7.853956348e-05f);
  pa = pa * x2 + -8.010224767e-04f;
  pa = pa * x2 + 5.188331619e-03f;
  pa = pa * x2 + -2.685381432e-02f;
  pa = pa * x2 + 1.128358522e-01f;
  pa = pa * x2 + -3.761262583e-01f;
  pa = pa * x2 + 1.283791664e-01f;
  const VF small = x + x * pa;
  // 1 < |x| < 3.93: erf(x) = 1 - e^(-x^2) * R(1 / (|x| + 1)), R fitting erfc(x) e^(x^2).
  const VF t = 1.0f / (ax + 1.0f);
  VF pb = splat(-6.339514073e-01f);
  pb = pb * t + 1.376391190e+00f;
  pb = pb * t + -6.912595107e-01f;
  pb = pb * t + -5.901374621e-01f;
  pb = pb * t + 4.145018698e-01f;
  pb = pb * t + 5.373647560e-01f;
  pb = pb * t + 5.669581210e-01f;
  pb = pb * t + -1.173261080e-04f;
  VF large = 1.0f - exp(-x2) * pb;
  // Beyond 3.93 erf rounds to +-1 in float.
  large = ax > 3.93f ? splat(1.0f) : large;
  large = copysign(large, x);
  return ax <= 1.0f ? small : large;  // NaN takes the large branch, which keeps it NaN
}

inline VF tanh(VF x) {
  const VF ax = vabs(x);
  const VF x2 = x * x;
  // |x| < 0.625: tanh(x) = x * P(x^2); above, 1 - 2 / (e^(2|x|) + 1) loses at most a bit.
  VF p = splat(-5.660083190e-03f);
  p = p * x2 + 2.059108967e-02f;
  p = p * x2 + -5.372110769e-02f;
  p = p * x2 + 1.333112822e-01f;
  p = p * x2 + -3.333326057e-01f;
  p = p * x2 + 9.999999961e-01f;
  const VF small = x * p;
  const VF e = exp(ax + ax);
  const VF large = copysign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

inline VF sigmoid(VF x) {
  // exp of -|x| never overflows; for x < 0, e^x / (1 + e^x).
  const VF e = exp(-vabs(x));
  return (x >= 0.0f ? splat(1.0f) : e) / (1.0f + e);
}

// out[i] = f(in[i]) over 8-lane blocks; the tail is padded into one more block.
template <typename F>
void map(ThreadPool& pool, const float* in, float* out, int64_t n, F f) {
  pool.parallel_for(n, kParallelGrain / 4, [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      VF v;
      std::memcpy(&v, in + i, sizeof(v));
      v = f(v);
      std::memcpy(out + i, &v, sizeof(v));
    }
    if (i < e) {
      const size_t bytes = static_cast<size_t>(e - i) * sizeof(float);
      VF v = splat(0.0f);
      std::memcpy(&v, in + i, bytes);
      v = f(v);
      std::memcpy(out + i, &v, bytes);
    }
  });
}

// out[i] = f(a[i], b[i]) for same-shaped operands.
template <typename F>
void zip(ThreadPool& pool, const float* a, const float* b, float* out, int64_t n, F f) {
  pool.parallel_for(n, kParallelGrain / 4, [&](int64_t s, int64_t e) {
    int64_t i = s;
    for (; i + kLanes <= e; i += kLanes) {
      VF va, vb;
      std::memcpy(&va, a + i, sizeof(va));
      std::memcpy(&vb, b + i, sizeof(vb));
      VF v = f(va, vb);
      std::memcpy(out + i, &v, sizeof(v));
    }
    if (i < e) {
      const size_t bytes = static_cast<size_t>(e - i) * sizeof(float);
      VF va = splat(0.0f), vb = splat(0.0f);
      std::memcpy(&va, a + i, bytes);
      std::memcpy(&vb, b + i, bytes);
      VF v = f(va, vb);
      std::memcpy(out + i, &v, bytes);
    }
  });
}

}  // namespace onnxtrain::fast

namespace onnxtrain {

inline void fast_exp(ThreadPool& pool, const float* in, float* out, int64_t n) {
  fast::map(pool, in, out, n, [](fast::VF v) { return fast::exp(v); });
}
inline void fast_erf(ThreadPool& pool, const float* in, float* out, int64_t n) {
  fast::map(pool, in, out, n, [](fast::VF v) { return fast::erf(v); });
}
inline void fast_tanh(ThreadPool& pool, const float* in, float* out, int64_t n) {
  fast::map(pool, in, out, n, [](fast::VF v) { return fast::tanh(v); });
}
inline void fast_sigmoid(ThreadPool& pool, const float* in, float* out, int64_t n) {
  fast::map(pool, in, out, n, [](fast::VF v) { return fast::sigmoid(v); });
}

}  // namespace onnxtrain
