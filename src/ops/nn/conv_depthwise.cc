#include "ops/nn/conv_depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace onnxtrain {
namespace {

// Output positions [lo, hi) along an axis whose input position o * stride + off lies in [0, n).
void valid(int64_t n, int64_t outs, int64_t stride, int64_t off, int64_t& lo, int64_t& hi) {
  lo = std::min(outs, off >= 0 ? 0 : ceil_div(-off, stride));
  hi = std::max(lo, std::min(outs, n - 1 - off < 0 ? 0 : floor_div(n - 1 - off, stride) + 1));
}

// The valid output range of every innermost kernel tap: it depends on neither the row nor the
// plane, so it is computed once per call (integer divisions per row would dominate small planes).
struct WidthTaps {
  std::vector<int64_t> lo, hi, off;
  explicit WidthTaps(const ConvGeometry& g) {
    for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
      int64_t l, h;
      const int64_t o = kw * g.dilation[2] - g.pad_begin[2];
      valid(g.in[2], g.out[2], g.stride[2], o, l, h);
      lo.push_back(l);
      hi.push_back(h);
      off.push_back(o);
    }
  }
};

// Calls row(out_row, in_row, lo, hi, off, tap) for every (output row, kernel tap) pair of one
// plane where the tap's input row exists: output positions [lo, hi) of the row read input
// position ow * stride_w + off.
template <typename Fn>
void for_each_row_tap(const ConvGeometry& g, const WidthTaps& taps, Fn row) {
  const int64_t OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  for (int64_t od = 0; od < OD; ++od)
    for (int64_t kd = 0; kd < KD; ++kd) {
      const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
      if (id < 0 || id >= g.in[0]) continue;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          const int64_t orow = (od * OH + oh) * OW, irow = (id * g.in[1] + ih) * g.in[2];
          const int64_t tap0 = (kd * KH + kh) * KW;
          for (int64_t kw = 0; kw < KW; ++kw)
            if (taps.lo[kw] < taps.hi[kw]) row(orow, irow, taps.lo[kw], taps.hi[kw], taps.off[kw], tap0 + kw);
        }
    }
}

// Runs fn(i) for i < count in parallel, `work` multiply-adds each.
template <typename Fn>
void for_each_plane_of(ThreadPool& pool, int64_t count, int64_t work, Fn fn) {
  pool.parallel_for(count, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, work)),
                    [&](int64_t p0, int64_t p1) {
                      for (int64_t p = p0; p < p1; ++p) fn(p);
                    });
}

// ---- stride 1, 2-D: the depthwise convolutions of MobileNet, EfficientNet and ConvNeXt ----
//
// The plane is copied once into a zero-padded buffer, so that every tap reads full rows with no
// edge cases. Output tiles of kRows rows x Vecs vectors keep their accumulators in registers
// across all KH x KW taps, and the kRows x Vecs independent sums hide the FMA latency (a single
// row's chain of 49 dependent FMAs ran at a sixth of that speed).

constexpr int64_t kRows = 4;

template <typename T>
struct Vec {
  static constexpr int64_t kLanes = 32 / sizeof(T);
  typedef T type __attribute__((vector_size(32)));
  static type load(const T* p) {
    type v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static type splat(T x) { return type{} + x; }
};

bool is_plain_2d(const ConvGeometry& g) {
  return g.spatial == 2 && g.stride[1] == 1 && g.stride[2] == 1 && g.dilation[1] == 1 && g.dilation[2] == 1;
}

// Columns per output tile: two vectors, or one for narrow planes (4x4 maps would waste 3/4).
template <typename T>
int64_t tile_width(int64_t OW) {
  return OW <= Vec<T>::kLanes ? Vec<T>::kLanes : 2 * Vec<T>::kLanes;
}

// Padded buffer geometry: rows and columns enough for whole tiles of an [OH, OW] output read
// through a KH x KW window.
struct PaddedShape {
  int64_t rows, cols;
};
template <typename T>
PaddedShape padded_shape(int64_t OH, int64_t OW, int64_t KH, int64_t KW) {
  const int64_t tw = tile_width<T>(OW);
  return {(OH + kRows - 1) / kRows * kRows + KH - 1, (OW + tw - 1) / tw * tw + KW - 1};
}

// Copies plane `src` [H, W] into `dst` (PH x PW) at offset (top, left) with zero borders; negative
// offsets crop.
template <typename T>
void pad_plane(const T* src, int64_t H, int64_t W, int64_t top, int64_t left, const PaddedShape& ps, T* dst) {
  std::fill(dst, dst + ps.rows * ps.cols, T(0));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t ph = h + top;
    if (ph < 0 || ph >= ps.rows) continue;
    const int64_t w0 = std::max<int64_t>(0, -left), w1 = std::min<int64_t>(W, ps.cols - left);
    if (w0 < w1) std::copy(src + h * W + w0, src + h * W + w1, dst + ph * ps.cols + w0 + left);
  }
}

// out[oh, ow] = init + sum over taps of wt[kh, kw] * padded[oh + kh, ow + kw] for an [OH, OW] output.
template <typename T, int64_t kVecs>
void correlate_tiles(const T* padded, int64_t PW, const T* wt, int64_t KH, int64_t KW, T init, int64_t OH, int64_t OW,
                     T* out) {
  using V = Vec<T>;
  constexpr int64_t W = kVecs * V::kLanes;
  for (int64_t oh0 = 0; oh0 < OH; oh0 += kRows) {
    for (int64_t ow0 = 0; ow0 < OW; ow0 += W) {
      typename V::type acc[kRows][kVecs];
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = V::splat(init);
      for (int64_t kh = 0; kh < KH; ++kh) {
        const T* base = padded + (oh0 + kh) * PW + ow0;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const typename V::type wv = V::splat(wt[kh * KW + kw]);
          for (int64_t r = 0; r < kRows; ++r)
            for (int64_t v = 0; v < kVecs; ++v) acc[r][v] += wv * V::load(base + r * PW + kw + v * V::kLanes);
        }
      }
      const int64_t n = std::min(W, OW - ow0), rows = std::min(kRows, OH - oh0);
      for (int64_t r = 0; r < rows; ++r) {
        T tmp[W];
        std::memcpy(tmp, acc[r], sizeof tmp);
        std::copy(tmp, tmp + n, out + (oh0 + r) * OW + ow0);
      }
    }
  }
}

template <typename T>
void correlate_padded(const T* padded, int64_t PW, const T* wt, int64_t KH, int64_t KW, T init, int64_t OH,
                      int64_t OW, T* out) {
  if (tile_width<T>(OW) == Vec<T>::kLanes) correlate_tiles<T, 1>(padded, PW, wt, KH, KW, init, OH, OW, out);
  else correlate_tiles<T, 2>(padded, PW, wt, KH, KW, init, OH, OW, out);
}

// acc[r] += the lanes of sum over the plane of dy[oh, ow] * padded[oh + kh, ow + kw], over tiles of
// kRows rows (positions past the output in a tile read zero-padded dy, so they add nothing). The
// lanes are summed once per channel, not once per plane and tap.
template <typename T>
void tap_dot(const T* dy_padded, int64_t DW, const T* padded, int64_t PW, int64_t kh, int64_t kw, int64_t OH,
             int64_t OW, typename Vec<T>::type* acc) {
  using V = Vec<T>;
  typename V::type a[kRows];
  for (int64_t r = 0; r < kRows; ++r) a[r] = acc[r];
  for (int64_t oh0 = 0; oh0 < OH; oh0 += kRows)
    for (int64_t ow0 = 0; ow0 < OW; ow0 += V::kLanes)
      for (int64_t r = 0; r < kRows; ++r)
        a[r] += V::load(dy_padded + (oh0 + r) * DW + ow0) * V::load(padded + (oh0 + r + kh) * PW + ow0 + kw);
  for (int64_t r = 0; r < kRows; ++r) acc[r] = a[r];
}

template <typename T>
double lane_sum(const typename Vec<T>::type* acc) {
  double s = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    T lanes[Vec<T>::kLanes];
    std::memcpy(lanes, &acc[r], sizeof lanes);
    for (int64_t j = 0; j < Vec<T>::kLanes; ++j) s += static_cast<double>(lanes[j]);
  }
  return s;
}

template <typename T>
void forward_plain(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const PaddedShape ps = padded_shape<T>(OH, OW, KH, KW);
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C, planes = g.batch * M;
  pool.parallel_for(planes, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, OH * OW * KH * KW)),
                    [&](int64_t p0, int64_t p1) {
                      std::vector<T> padded(static_cast<size_t>(ps.rows * ps.cols));
                      int64_t padded_plane = -1;  // consecutive outputs of one input share its padded copy
                      for (int64_t p = p0; p < p1; ++p) {
                        const int64_t n = p / M, m = p % M, in_plane = n * C + m / per_input;
                        if (in_plane != padded_plane) {
                          pad_plane(x + in_plane * IH * IW, IH, IW, g.pad_begin[1], g.pad_begin[2], ps, padded.data());
                          padded_plane = in_plane;
                        }
                        correlate_padded(padded.data(), ps.cols, w + m * KH * KW, KH, KW, b ? b[m] : T(0), OH, OW,
                                         y + p * OH * OW);
                      }
                    });
}

// The data gradient at stride 1 is a correlation of dY, padded by K - 1 - pad, with the flipped
// kernel, summed over the outputs that read the input channel.
template <typename T>
void backward_data_plain(ThreadPool& pool, const ConvGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const PaddedShape ps = padded_shape<T>(IH, IW, KH, KW);
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C, planes = g.batch * C;
  std::vector<T> flipped(static_cast<size_t>(M * KH * KW));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < KH * KW; ++k) flipped[m * KH * KW + k] = w[m * KH * KW + (KH * KW - 1 - k)];
  pool.parallel_for(planes, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, per_input * IH * IW * KH * KW)),
                    [&](int64_t p0, int64_t p1) {
                      std::vector<T> padded(static_cast<size_t>(ps.rows * ps.cols));
                      std::vector<T> part(per_input > 1 ? static_cast<size_t>(IH * IW) : 0);
                      for (int64_t p = p0; p < p1; ++p) {
                        const int64_t n = p / C, c = p % C;
                        T* out = dx + p * IH * IW;
                        for (int64_t j = 0; j < per_input; ++j) {
                          const int64_t m = c * per_input + j;
                          pad_plane(dy + (n * M + m) * OH * OW, OH, OW, KH - 1 - g.pad_begin[1], KW - 1 - g.pad_begin[2],
                                    ps, padded.data());
                          T* target = j == 0 ? out : part.data();
                          correlate_padded(padded.data(), ps.cols, flipped.data() + m * KH * KW, KH, KW, T(0), IH, IW,
                                           target);
                          if (j > 0)
                            for (int64_t i = 0; i < IH * IW; ++i) out[i] += part[static_cast<size_t>(i)];
                        }
                      }
                    });
}

// dW[m, kh, kw] = sum over the batch of dY[m] . X[input of m] shifted by the tap; X and dY both
// padded so that whole tiles read zeros where they overhang.
template <typename T>
void backward_weights_plain(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* dy, T* dw) {
  const int64_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C;
  const PaddedShape ps = padded_shape<T>(OH, OW, KH, KW);
  const PaddedShape ds{(OH + kRows - 1) / kRows * kRows, (OW + Vec<T>::kLanes - 1) / Vec<T>::kLanes * Vec<T>::kLanes};
  pool.parallel_for(M, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, g.batch * OH * OW * KH * KW)),
                    [&](int64_t m0, int64_t m1) {
                      std::vector<T> padded(static_cast<size_t>(ps.rows * ps.cols));
                      std::vector<T> dy_padded(static_cast<size_t>(ds.rows * ds.cols));
                      using VT = typename Vec<T>::type;
                      std::vector<VT> acc(static_cast<size_t>(KH * KW * kRows));
                      for (int64_t m = m0; m < m1; ++m) {
                        std::fill(acc.begin(), acc.end(), VT{});
                        for (int64_t n = 0; n < g.batch; ++n) {
                          pad_plane(x + (n * C + m / per_input) * IH * IW, IH, IW, g.pad_begin[1], g.pad_begin[2], ps,
                                    padded.data());
                          pad_plane(dy + (n * M + m) * OH * OW, OH, OW, 0, 0, ds, dy_padded.data());
                          for (int64_t kh = 0; kh < KH; ++kh)
                            for (int64_t kw = 0; kw < KW; ++kw)
                              tap_dot(dy_padded.data(), ds.cols, padded.data(), ps.cols, kh, kw, OH, OW,
                                      acc.data() + (kh * KW + kw) * kRows);
                        }
                        for (int64_t k = 0; k < KH * KW; ++k)
                          dw[m * KH * KW + k] = static_cast<T>(lane_sum<T>(acc.data() + k * kRows));
                      }
                    });
}

}  // namespace

bool is_depthwise(const ConvGeometry& g) {
  return g.group == g.image_channels && g.col_channels % g.group == 0 && g.image_channels > 0;
}

template <typename T>
void depthwise_forward(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  if (is_plain_2d(g)) return forward_plain(pool, g, x, w, b, y);
  const WidthTaps taps(g);
  const int64_t IS = g.in_size(), OS = g.out_size(), K = g.kernel_size(), sw = g.stride[2];
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C;
  for_each_plane_of(pool, g.batch * M, OS * K, [&](int64_t p) {
    const int64_t n = p / M, m = p % M;
    T* yp = y + p * OS;
    std::fill(yp, yp + OS, b ? b[m] : T(0));
    const T* xp = x + (n * C + m / per_input) * IS;
    const T* wm = w + m * K;
    for_each_row_tap(g, taps, [&](int64_t orow, int64_t irow, int64_t lo, int64_t hi, int64_t off, int64_t tap) {
      T* o = yp + orow;
      const T* in = xp + irow + off;
      const T wv = wm[tap];
      if (sw == 1) {
        for (int64_t ow = lo; ow < hi; ++ow) o[ow] += wv * in[ow];
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) o[ow] += wv * in[ow * sw];
      }
    });
  });
}

template <typename T>
void depthwise_backward_data(ThreadPool& pool, const ConvGeometry& g, const T* dy, const T* w, T* dx) {
  if (is_plain_2d(g) && g.pad_begin[1] <= g.kernel[1] - 1 && g.pad_begin[2] <= g.kernel[2] - 1)
    return backward_data_plain(pool, g, dy, w, dx);
  const WidthTaps taps(g);
  const int64_t IS = g.in_size(), OS = g.out_size(), K = g.kernel_size(), sw = g.stride[2];
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C;
  for_each_plane_of(pool, g.batch * C, per_input * OS * K, [&](int64_t p) {
    const int64_t n = p / C, c = p % C;
    T* dxp = dx + p * IS;
    std::fill(dxp, dxp + IS, T(0));
    for (int64_t m = c * per_input; m < (c + 1) * per_input; ++m) {
      const T* dyp = dy + (n * M + m) * OS;
      const T* wm = w + m * K;
      for_each_row_tap(g, taps, [&](int64_t orow, int64_t irow, int64_t lo, int64_t hi, int64_t off, int64_t tap) {
        const T* d = dyp + orow;
        T* in = dxp + irow + off;
        const T wv = wm[tap];
        if (sw == 1) {
          for (int64_t ow = lo; ow < hi; ++ow) in[ow] += wv * d[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) in[ow * sw] += wv * d[ow];
        }
      });
    }
  });
}

template <typename T>
void depthwise_backward_weights(ThreadPool& pool, const ConvGeometry& g, const T* x, const T* dy, T* dw) {
  if (is_plain_2d(g)) return backward_weights_plain(pool, g, x, dy, dw);
  const WidthTaps taps(g);
  const int64_t IS = g.in_size(), OS = g.out_size(), K = g.kernel_size(), sw = g.stride[2];
  const int64_t M = g.col_channels, C = g.image_channels, per_input = M / C;
  // Tasks own output channels, so each tap's sum over the batch is one task's: no reduction afterwards.
  for_each_plane_of(pool, M, g.batch * OS * K, [&](int64_t m) {
    std::vector<double> acc(static_cast<size_t>(K), 0.0);
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* xp = x + (n * C + m / per_input) * IS;
      const T* dyp = dy + (n * M + m) * OS;
      for_each_row_tap(g, taps, [&](int64_t orow, int64_t irow, int64_t lo, int64_t hi, int64_t off, int64_t tap) {
        const T* d = dyp + orow;
        const T* in = xp + irow + off;
        double s = 0;
        for (int64_t ow = lo; ow < hi; ++ow) s += static_cast<double>(d[ow] * in[ow * sw]);
        acc[static_cast<size_t>(tap)] += s;
      });
    }
    for (int64_t k = 0; k < K; ++k) dw[m * K + k] = static_cast<T>(acc[static_cast<size_t>(k)]);
  });
}

#define OT_DEPTHWISE(T)                                                                                         \
  template void depthwise_forward<T>(ThreadPool&, const ConvGeometry&, const T*, const T*, const T*, T*);      \
  template void depthwise_backward_data<T>(ThreadPool&, const ConvGeometry&, const T*, const T*, T*);           \
  template void depthwise_backward_weights<T>(ThreadPool&, const ConvGeometry&, const T*, const T*, T*);
OT_DEPTHWISE(float)
OT_DEPTHWISE(double)
#undef OT_DEPTHWISE

}  // namespace onnxtrain
