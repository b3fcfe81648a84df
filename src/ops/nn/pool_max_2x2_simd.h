#pragma once
// MaxPool2d(2) rows in AVX-512 (or AVX2) for float32. GCC turns the portable select chains back into
// compare-and-branch code, which mispredicts on real data and made pooling several times slower
// than the memory traffic allows; here every decision is a mask. Ties and NaN follow PyTorch: the
// first maximum in window order wins, a NaN always takes over.
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>

namespace onnxtrain::pool_simd {

inline constexpr bool kAvailable = true;

struct Lanes {
  __m512i even, odd, interleave_lo, interleave_hi;
  Lanes() {
    even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    interleave_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    interleave_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  }
};

inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Lanes where v takes over from best: greater, or NaN.
inline __mmask16 takes_over(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}

// Even and odd elements of 2n floats at p (n <= 16 windows).
inline void load_pairs(const Lanes& l, const float* p, int64_t n, __m512& first, __m512& second) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_n(2 * n), p);
  const __m512 hi = _mm512_maskz_loadu_ps(first_n(2 * n - 16), p + 16);
  first = _mm512_permutex2var_ps(lo, l.even, hi);
  second = _mm512_permutex2var_ps(lo, l.odd, hi);
}

// y[ow] = max of the 2x2 window over rows a, b; all OW windows (masked tails).
inline int64_t forward_row(const float* a, const float* b, float* y, int64_t OW) {
  static const Lanes l;
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = OW - ow < 16 ? OW - ow : 16;
    __m512 p, q, r, s;
    load_pairs(l, a + 2 * ow, n, p, q);
    load_pairs(l, b + 2 * ow, n, r, s);
    __m512 m = _mm512_mask_blend_ps(takes_over(q, p), p, q);
    m = _mm512_mask_blend_ps(takes_over(r, m), m, r);
    m = _mm512_mask_blend_ps(takes_over(s, m), m, s);
    _mm512_mask_storeu_ps(y + ow, first_n(n), m);
  }
  return OW;
}

// dY of each window goes to its maximum's position in rows da, db; everything else is zero.
inline int64_t grad_row(const float* a, const float* b, const float* dy, float* da, float* db, int64_t OW) {
  static const Lanes l;
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = OW - ow < 16 ? OW - ow : 16;
    __m512 p, q, r, s;
    load_pairs(l, a + 2 * ow, n, p, q);
    load_pairs(l, b + 2 * ow, n, r, s);
    const __mmask16 k1 = takes_over(q, p);
    __m512 m = _mm512_mask_blend_ps(k1, p, q);
    const __mmask16 k2 = takes_over(r, m);
    m = _mm512_mask_blend_ps(k2, m, r);
    const __mmask16 k3 = takes_over(s, m);
    // The last candidate that took over wins.
    const __mmask16 w3 = k3, w2 = k2 & ~k3, w1 = k1 & ~k2 & ~k3, w0 = ~(k1 | k2 | k3);
    const __m512 v = _mm512_maskz_loadu_ps(first_n(n), dy + ow);
    const __m512 gp = _mm512_maskz_mov_ps(w0, v), gq = _mm512_maskz_mov_ps(w1, v);
    const __m512 gr = _mm512_maskz_mov_ps(w2, v), gs = _mm512_maskz_mov_ps(w3, v);
    const __mmask16 lo = first_n(2 * n), hi = first_n(2 * n - 16);
    _mm512_mask_storeu_ps(da + 2 * ow, lo, _mm512_permutex2var_ps(gp, l.interleave_lo, gq));
    _mm512_mask_storeu_ps(da + 2 * ow + 16, hi, _mm512_permutex2var_ps(gp, l.interleave_hi, gq));
    _mm512_mask_storeu_ps(db + 2 * ow, lo, _mm512_permutex2var_ps(gr, l.interleave_lo, gs));
    _mm512_mask_storeu_ps(db + 2 * ow + 16, hi, _mm512_permutex2var_ps(gr, l.interleave_hi, gs));
  }
  return OW;
}

}  // namespace onnxtrain::pool_simd

#elif defined(__AVX2__)
#include <immintrin.h>

// AVX2: eight windows per step, the row's tail with masked loads and stores. The even/odd
// deinterleave within 128-bit halves leaves windows in the order 0 1 4 5 2 3 6 7; dY is loaded in
// that order too, and unpacking the per-position gradients restores the natural order of the two
// output rows.
namespace onnxtrain::pool_simd {

inline constexpr bool kAvailable = true;

// Mask of the first n of eight float lanes (n clamped to [0, 8]).
inline __m256i first_n(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int k = static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lanes);
}

// Lanes (all bits set) where v takes over from best: greater, or NaN.
inline __m256 takes_over(__m256 v, __m256 best) {
  return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// Even and odd elements of the 2n floats at p (n <= 8 windows), windows in 0 1 4 5 2 3 6 7 order.
inline void load_pairs(const float* p, int64_t n, __m256& first, __m256& second) {
  const __m256 lo = n >= 4 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_n(2 * n));
  const __m256 hi = n >= 8 ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, first_n(2 * n - 8));
  first = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  second = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
}

// 0 1 4 5 2 3 6 7 <-> 0 1 2 3 4 5 6 7 (its own inverse).
inline __m256 swap_middle(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
}

inline void store_first(float* p, int64_t n, __m256 v) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, first_n(n), v);
}

// y[ow] = max of the 2x2 window over rows a, b; returns OW (every window done).
inline int64_t forward_row(const float* a, const float* b, float* y, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ow += 8) {
    const int64_t n = OW - ow < 8 ? OW - ow : 8;
    __m256 p, q, r, s;
    load_pairs(a + 2 * ow, n, p, q);
    load_pairs(b + 2 * ow, n, r, s);
    __m256 m = _mm256_blendv_ps(p, q, takes_over(q, p));
    m = _mm256_blendv_ps(m, r, takes_over(r, m));
    m = _mm256_blendv_ps(m, s, takes_over(s, m));
    store_first(y + ow, n, swap_middle(m));
  }
  return OW;
}

// dY of each window goes to its maximum's position in rows da, db; everything else is zero.
inline int64_t grad_row(const float* a, const float* b, const float* dy, float* da, float* db, int64_t OW) {
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int64_t ow = 0; ow < OW; ow += 8) {
    const int64_t n = OW - ow < 8 ? OW - ow : 8;
    __m256 p, q, r, s;
    load_pairs(a + 2 * ow, n, p, q);
    load_pairs(b + 2 * ow, n, r, s);
    const __m256 k1 = takes_over(q, p);
    __m256 m = _mm256_blendv_ps(p, q, k1);
    const __m256 k2 = takes_over(r, m);
    m = _mm256_blendv_ps(m, r, k2);
    const __m256 k3 = takes_over(s, m);
    // The last candidate that took over wins.
    const __m256 w3 = k3, w2 = _mm256_andnot_ps(k3, k2), w1 = _mm256_andnot_ps(_mm256_or_ps(k2, k3), k1);
    const __m256 w0 = _mm256_andnot_ps(_mm256_or_ps(k1, _mm256_or_ps(k2, k3)), all);
    const __m256 dyv = n >= 8 ? _mm256_loadu_ps(dy + ow) : _mm256_maskload_ps(dy + ow, first_n(n));
    const __m256 v = swap_middle(dyv);
    const __m256 gp = _mm256_and_ps(w0, v), gq = _mm256_and_ps(w1, v);
    const __m256 gr = _mm256_and_ps(w2, v), gs = _mm256_and_ps(w3, v);
    store_first(da + 2 * ow, 2 * n, _mm256_unpacklo_ps(gp, gq));
    store_first(da + 2 * ow + 8, 2 * n - 8, _mm256_unpackhi_ps(gp, gq));
    store_first(db + 2 * ow, 2 * n, _mm256_unpacklo_ps(gr, gs));
    store_first(db + 2 * ow + 8, 2 * n - 8, _mm256_unpackhi_ps(gr, gs));
  }
  return OW;
}

}  // namespace onnxtrain::pool_simd

#else

namespace onnxtrain::pool_simd {
inline constexpr bool kAvailable = false;
}  // namespace onnxtrain::pool_simd

#endif
