#pragma once
// MaxPool2d(2) rows in AVX-512 for float32. GCC turns the portable select chains back into
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

// y[ow] = max of the 2x2 window over rows a, b.
inline void forward_row(const float* a, const float* b, float* y, int64_t OW) {
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
}

// dY of each window goes to its maximum's position in rows da, db; everything else is zero.
inline void grad_row(const float* a, const float* b, const float* dy, float* da, float* db, int64_t OW) {
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
}

}  // namespace onnxtrain::pool_simd

#else

namespace onnxtrain::pool_simd {
inline constexpr bool kAvailable = false;
inline void forward_row(const float*, const float*, float*, int64_t) {}
inline void grad_row(const float*, const float*, const float*, float*, float*, int64_t) {}
}  // namespace onnxtrain::pool_simd

#endif
