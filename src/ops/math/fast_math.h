#pragma once
// Vectorized float32 exp, expm1, log, softplus, erf, tanh and sigmoid: the transcendental ops on
// every training step (GELU and SiLU reach us decomposed into Erf, Tanh, Sigmoid). libm's scalar
// calls do not vectorize, so these are written branch-free over 8 lanes with GCC vector extensions, which
// compile to whatever -march allows (AVX2/AVX-512, or pairs of SSE ops).
//
// Accuracy (checked against double-precision libm over dense samples, tests/cpp/test_fast_math.cc):
// exp within 1.0 ulp of the correctly rounded value, erf and tanh within 1.5, log within 2, sigmoid
// within 2.5, expm1 and softplus within 3; NaN propagated, +-inf and overflow/underflow as libm.
// Polynomials are least-squares-minimax fits of the relative error, made for this file; log's
// are the atanh series, which needs no fit.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ops/common/elementwise.h"

namespace onnxtrain::fast {

typedef float VF __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
typedef uint32_t VU __attribute__((vector_size(32)));
inline constexpr int kLanes = 8;

// v in every lane (VF{} + v would turn -0 into +0).
inline VF splat(float v) { return VF{v, v, v, v, v, v, v, v}; }

// Elementwise math written once for a float, a double and an 8-lane VF alike (see
// float_unary_vectorized): lane_t is the element type for constants, broadcast<V> a constant in
// every lane. With `using std::exp; using fast::exp;` in scope, exp(x) picks the lane's form.
template <typename V>
struct Lane {
  using type = V;
};
template <>
struct Lane<VF> {
  using type = float;
};
template <typename V>
using lane_t = typename Lane<V>::type;

template <typename V>
V broadcast(lane_t<V> v) {
  if constexpr (std::is_same_v<V, VF>) return splat(v);
  else return v;
}
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

// tanh(x) for |x| < 0.625: x * P(x^2).
inline VF tanh_near_zero(VF x) {
  const VF x2 = x * x;
  VF p = splat(-5.660083190e-03f);
  p = p * x2 + 2.059108967e-02f;
  p = p * x2 + -5.372110769e-02f;
  p = p * x2 + 1.333112822e-01f;
  p = p * x2 + -3.333326057e-01f;
  p = p * x2 + 9.999999961e-01f;
  return x * p;
}

inline VF tanh(VF x) {
  const VF ax = vabs(x);
  // |x| < 0.625: the polynomial; above, 1 - 2 / (e^(2|x|) + 1) loses at most a bit.
  const VF small = tanh_near_zero(x);
  const VF e = exp(ax + ax);
  const VF large = copysign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

inline VF sigmoid(VF x) {
  // exp of -|x| never overflows; for x < 0, e^x / (1 + e^x).
  const VF e = exp(-vabs(x));
  return (x >= 0.0f ? splat(1.0f) : e) / (1.0f + e);
}

// e^z - 1 without the cancellation of exp(z) - 1 near 0: for |z| < 0.7 it is 2t / (1 - t) with
// t = tanh(z / 2) from its polynomial, and 1 - t >= 0.66 loses nothing; beyond, e^z - 1 is at
// least half of e^z or of 1 in size, and subtracting loses at most a bit. NaN stays NaN, -inf
// gives -1.
inline VF expm1(VF z) {
  const VF t = tanh_near_zero(z * 0.5f);
  const VF near_zero = (t + t) / (1.0f - t);
  return vabs(z) < 0.7f ? near_zero : exp(z) - 1.0f;
}

// 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...), the series behind both logarithms below. `terms`
// odd powers after s: the first one left out is below 2^-28 of the sum for the |s| each caller
// guarantees, so no fitted coefficients are needed.
template <int terms>
inline VF twice_atanh_series(VF s) {
  const VF s2 = s * s;
  VF p = splat(1.0f / (2 * terms + 1));
  for (int k = terms - 1; k >= 1; --k) p = p * s2 + 1.0f / (2 * k + 1);
  p = p * s2;
  const VF twice = s + s;
  return twice + twice * p;
}

// Natural logarithm: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m - 1) / (m + 1))
// with |s| <= 0.172 (m - 1 is exact), e ln2 added in two parts. Subnormals are scaled by 2^23
// first; 0 gives -inf, negatives NaN, inf and NaN themselves.
inline VF log(VF x) {
  const VF subnormal_scale = x < 1.17549435e-38f ? splat(8388608.0f) : splat(1.0f);
  const VF scaled = x * subnormal_scale;
  VI e = (VI)(((VU)scaled >> 23u) & 0xffu) - 127;
  e = e - ((VI)(subnormal_scale > 1.0f) & 23);
  VF m = (VF)(((VU)scaled & 0x007fffffu) | 0x3f800000u);
  const auto high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = e - (VI)high;  // a true comparison lane is -1: e + 1
  const VF ef = __builtin_convertvector(e, VF);
  const VF log_m = twice_atanh_series<5>((m - 1.0f) / (m + 1.0f));
  VF y = ef * 0.693359375f + (ef * -2.12194440e-4f + log_m);
  y = x == 0.0f ? splat(-INFINITY) : y;
  y = x < 0.0f ? splat(NAN) : y;
  return x > 3.40282347e38f || x != x ? x : y;  // inf and NaN
}

// log(1 + u) for 0 <= u <= 1 (softplus's log1p(e^-|x|)): 2 atanh(u / (2 + u)), s <= 1/3.
inline VF log1p_of_unit(VF u) { return twice_atanh_series<8>(u / (u + 2.0f)); }

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): neither overflows nor loses the small
// values of very negative x.
inline VF softplus(VF x) {
  const VF positive = x > 0.0f ? x : splat(0.0f);
  const VF y = positive + log1p_of_unit(exp(-vabs(x)));
  return x != x ? x : y;
}

// out[i] = f(in[i]) for i < n on this thread, over 8-lane blocks; the tail is padded into one
// more block. in and out may be the same span.
template <typename F>
void map_span(const float* in, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VF v;
    std::memcpy(&v, in + i, sizeof(v));
    v = f(v);
    std::memcpy(out + i, &v, sizeof(v));
  }
  if (i < n) {
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    VF v = splat(0.0f);
    std::memcpy(&v, in + i, bytes);
    v = f(v);
    std::memcpy(out + i, &v, bytes);
  }
}

// out[i] = f(a[i], b[i]) for i < n on this thread, as map_span.
template <typename F>
void zip_span(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VF va, vb;
    std::memcpy(&va, a + i, sizeof(va));
    std::memcpy(&vb, b + i, sizeof(vb));
    VF v = f(va, vb);
    std::memcpy(out + i, &v, sizeof(v));
  }
  if (i < n) {
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    VF va = splat(0.0f), vb = splat(0.0f);
    std::memcpy(&va, a + i, bytes);
    std::memcpy(&vb, b + i, bytes);
    VF v = f(va, vb);
    std::memcpy(out + i, &v, bytes);
  }
}

// map_span over the pool.
template <typename F>
void map(ThreadPool& pool, const float* in, float* out, int64_t n, F f) {
  pool.parallel_for(n, kParallelGrain / 4, [&](int64_t b, int64_t e) { map_span(in + b, out + b, e - b, f); });
}

// zip_span over the pool, for same-shaped operands.
template <typename F>
void zip(ThreadPool& pool, const float* a, const float* b, float* out, int64_t n, F f) {
  pool.parallel_for(n, kParallelGrain / 4, [&](int64_t s, int64_t e) { zip_span(a + s, b + s, out + s, e - s, f); });
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
