// The convolution primitives: im2col / col2im plus one GEMM per group.
//
// Work split. Images run in "slots": a slot owns a contiguous run of images and its own scratch,
// and runs on one thread at a time (batch-parallel). Large images with a small batch use one
// slot and let each GEMM split itself across the pool instead.
// Within a slot, images with few output positions are batched ("chunk" images side by side in
// one column matrix), so that LeNet-sized layers run one large GEMM instead of many tiny ones
// that OpenBLAS handles poorly; outputs then go through a small gather/scatter copy.
#include <algorithm>

#include "opdef/kernel.h"
#include "ops/nn/conv_common.h"
#include "runtime/blas.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Column positions [lo, hi) along one axis whose image position o * stride + off lies in [0, n).
void valid_columns(int64_t n, int64_t cols, int64_t stride, int64_t off, int64_t& lo, int64_t& hi) {
  lo = std::min(cols, off >= 0 ? 0 : ceil_div(-off, stride));
  hi = std::max(lo, std::min(cols, n - 1 - off < 0 ? 0 : floor_div(n - 1 - off, stride) + 1));
}

// Walks the column matrix of `channels` image channels (row = channel x tap, rows `ld` apart)
// and calls fn(segment, image_row, lo, hi, off) for every innermost run of OW column positions:
// image_row is null when the whole run falls in padding, otherwise position ow in [lo, hi)
// reads image_row[ow * stride_w + off]. Taps are the outer loops so that their valid ranges
// (integer divisions) are computed once for all channels.
template <typename ColT, typename ImgT, typename Fn>
void walk_taps(const ConvGeometry& g, ColT* col, int64_t ld, ImgT* image, int64_t channels, Fn fn) {
  const int64_t OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const int64_t ID = g.in[0], IH = g.in[1], IW = g.in[2];
  const int64_t taps = g.kernel_size();
  int64_t tap = 0;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    const int64_t off_d = kd * g.dilation[0] - g.pad_begin[0];
    int64_t d_lo, d_hi;
    valid_columns(ID, OD, g.stride[0], off_d, d_lo, d_hi);
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      const int64_t off_h = kh * g.dilation[1] - g.pad_begin[1];
      int64_t h_lo, h_hi;
      valid_columns(IH, OH, g.stride[1], off_h, h_lo, h_hi);
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw, ++tap) {
        const int64_t off_w = kw * g.dilation[2] - g.pad_begin[2];
        int64_t w_lo, w_hi;
        valid_columns(IW, OW, g.stride[2], off_w, w_lo, w_hi);
        for (int64_t c = 0; c < channels; ++c) {
          ColT* row = col + (c * taps + tap) * ld;
          for (int64_t od = 0; od < OD; ++od) {
            const bool d_ok = od >= d_lo && od < d_hi;
            const int64_t id = od * g.stride[0] + off_d;
            for (int64_t oh = 0; oh < OH; ++oh) {
              ColT* seg = row + (od * OH + oh) * OW;
              if (!d_ok || oh < h_lo || oh >= h_hi) {
                fn(seg, static_cast<ImgT*>(nullptr), int64_t(0), int64_t(0), off_w);
                continue;
              }
              const int64_t ih = oh * g.stride[1] + off_h;
              fn(seg, image + ((c * ID + id) * IH + ih) * IW, w_lo, w_hi, off_w);
            }
          }
        }
      }
    }
  }
}

template <typename T>
void im2col(const ConvGeometry& g, const T* image, int64_t channels, T* col, int64_t ld) {
  const int64_t OW = g.out[2], sw = g.stride[2];
  walk_taps(g, col, ld, image, channels, [&](T* seg, const T* src, int64_t lo, int64_t hi, int64_t off) {
    if (!src) {
      std::fill(seg, seg + OW, T(0));
      return;
    }
    std::fill(seg, seg + lo, T(0));
    if (sw == 1) {
      std::copy(src + (lo + off), src + (hi + off), seg + lo);
    } else {
      for (int64_t ow = lo; ow < hi; ++ow) seg[ow] = src[ow * sw + off];
    }
    std::fill(seg + hi, seg + OW, T(0));
  });
}

// Accumulates the column matrix back into the image (which the caller zeroed).
template <typename T>
void col2im(const ConvGeometry& g, const T* col, int64_t ld, int64_t channels, T* image) {
  const int64_t sw = g.stride[2];
  walk_taps(g, col, ld, image, channels, [&](const T* seg, T* dst, int64_t lo, int64_t hi, int64_t off) {
    if (!dst) return;
    if (sw == 1) {
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow + off] += seg[ow];
    } else {
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow * sw + off] += seg[ow];
    }
  });
}

// GEMM columns worth batching images for: below this OpenBLAS spends more on packing and call
// overhead than on arithmetic.
constexpr int64_t kChunkColumns = 1024;
constexpr size_t kAlign = 64;

struct ConvPlan {
  int64_t Cg, Mg, K, P, IS;  // per-group channels, GEMM depth, output and input positions
  int64_t slots;             // images processed concurrently, each slot with its own scratch
  int64_t chunk;             // images per GEMM; 1 writes straight into the output
  bool direct;               // 1x1 taps, one image per GEMM: the image is its own column matrix
  size_t col_bytes, tmp_bytes;  // scratch per slot
};

size_t aligned_bytes(int64_t elements, size_t elem) {
  return (static_cast<size_t>(elements) * elem + kAlign - 1) / kAlign * kAlign;
}

ConvPlan plan_conv(ThreadPool& pool, const ConvGeometry& g, size_t elem) {
  ConvPlan p;
  p.Cg = g.image_channels / g.group;
  p.Mg = g.col_channels / g.group;
  p.K = p.Cg * g.kernel_size();
  p.P = g.out_size();
  p.IS = g.in_size();
  const int64_t threads = pool.num_threads();
  const double flops = 2.0 * double(g.col_channels) * double(p.K) * double(p.P);
  p.slots = threads <= 1 || g.batch <= 1 || (g.batch < threads && flops >= 4e6) ? 1 : std::min(g.batch, threads);
  const int64_t per_slot = p.slots > 0 && g.batch > 0 ? (g.batch + p.slots - 1) / p.slots : 1;
  p.chunk = p.P >= kChunkColumns || p.P == 0 ? 1
                                              : std::max<int64_t>(1, std::min(per_slot, ceil_div(kChunkColumns, p.P)));
  p.direct = p.chunk == 1 && g.is_pointwise();
  p.col_bytes = p.direct ? 0 : aligned_bytes(p.K * p.chunk * p.P, elem);
  p.tmp_bytes = p.chunk == 1 ? 0 : aligned_bytes(p.Mg * p.chunk * p.P, elem);
  return p;
}

// Calls fn(slot, first_image, count, first_of_slot) for every chunk: images are split into one
// contiguous run per slot, and a slot runs on one thread at a time, so per-slot buffers need no
// locks.
template <typename Fn>
void for_each_chunk(ThreadPool& pool, int64_t batch, const ConvPlan& p, Fn fn) {
  auto run_slot = [&](int64_t s) {
    const int64_t begin = batch * s / p.slots, end = batch * (s + 1) / p.slots;
    for (int64_t n = begin; n < end; n += p.chunk) fn(s, n, std::min(p.chunk, end - n), n == begin);
  };
  if (p.slots <= 1) {
    run_slot(0);
    return;
  }
  pool.parallel_for(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) run_slot(s);
  });
}

// A slot's scratch: its column matrix, then its gather/scatter buffer.
template <typename T>
struct SlotScratch {
  // Takes the plan's slots, and `extra_bytes` after them, from the kernel's scratch.
  SlotScratch(KernelContext& ctx, const ConvPlan& plan, size_t extra_bytes = 0)
      : p(plan), base(static_cast<char*>(ctx.scratch(bytes() + extra_bytes))) {}
  const ConvPlan& p;
  char* base;
  char* extra() const { return base + bytes(); }
  T* col(int64_t s) const { return reinterpret_cast<T*>(base + static_cast<size_t>(s) * (p.col_bytes + p.tmp_bytes)); }
  T* tmp(int64_t s) const {
    return reinterpret_cast<T*>(base + static_cast<size_t>(s) * (p.col_bytes + p.tmp_bytes) + p.col_bytes);
  }
  size_t bytes() const { return static_cast<size_t>(p.slots) * (p.col_bytes + p.tmp_bytes); }
};

// The group's rows of `count` images of a [N, channels, P] tensor, side by side as [rows, count*P].
template <typename T>
void gather(const T* src, int64_t channels, int64_t first_channel, int64_t rows, int64_t P, int64_t count, T* dst) {
  for (int64_t b = 0; b < count; ++b)
    for (int64_t r = 0; r < rows; ++r)
      std::copy(src + (b * channels + first_channel + r) * P, src + (b * channels + first_channel + r + 1) * P,
                dst + r * count * P + b * P);
}

}  // namespace

template <typename T>
void conv_image_to_cols(KernelContext& ctx, const ConvGeometry& g, const T* image, const T* weight, const T* bias,
                        T* cols) {
  ThreadPool& pool = ctx.threads();
  const ConvPlan p = plan_conv(pool, g, sizeof(T));
  const SlotScratch<T> scratch(ctx, p);
  const int64_t C = g.image_channels, M = g.col_channels;
  for_each_chunk(pool, g.batch, p, [&](int64_t s, int64_t n0, int64_t count, bool) {
    T* col = scratch.col(s);
    const int64_t ld = count * p.P;
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const T* w = weight + grp * p.Mg * p.K;
      const T* rhs = image + n0 * C * p.IS + grp * p.Cg * p.IS;
      if (!p.direct) {
        for (int64_t b = 0; b < count; ++b) im2col(g, rhs + b * C * p.IS, p.Cg, col + b * p.P, ld);
        rhs = col;
      }
      if (p.chunk == 1) {
        T* out = cols + n0 * M * p.P + grp * p.Mg * p.P;
        if (bias)
          for (int64_t m = 0; m < p.Mg; ++m) std::fill(out + m * p.P, out + (m + 1) * p.P, bias[grp * p.Mg + m]);
        gemm<T>(false, false, p.Mg, p.P, p.K, T(1), w, p.K, rhs, p.P, bias ? T(1) : T(0), out, p.P, pool);
        continue;
      }
      T* tmp = scratch.tmp(s);
      gemm<T>(false, false, p.Mg, ld, p.K, T(1), w, p.K, rhs, ld, T(0), tmp, ld, pool);
      for (int64_t b = 0; b < count; ++b)
        for (int64_t m = 0; m < p.Mg; ++m) {
          const T* src = tmp + m * ld + b * p.P;
          T* dst = cols + ((n0 + b) * M + grp * p.Mg + m) * p.P;
          const T add = bias ? bias[grp * p.Mg + m] : T(0);
          for (int64_t i = 0; i < p.P; ++i) dst[i] = src[i] + add;
        }
    }
  });
}

template <typename T>
void conv_cols_to_image(KernelContext& ctx, const ConvGeometry& g, const T* cols, const T* weight, const T* bias,
                        T* image) {
  ThreadPool& pool = ctx.threads();
  const ConvPlan p = plan_conv(pool, g, sizeof(T));
  const SlotScratch<T> scratch(ctx, p);
  const int64_t C = g.image_channels, M = g.col_channels;
  for_each_chunk(pool, g.batch, p, [&](int64_t s, int64_t n0, int64_t count, bool) {
    T* col = scratch.col(s);
    const int64_t ld = count * p.P;
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const T* w = weight + grp * p.Mg * p.K;
      const T* dy = cols + n0 * M * p.P + grp * p.Mg * p.P;
      if (p.chunk > 1) {
        gather(cols + n0 * M * p.P, M, grp * p.Mg, p.Mg, p.P, count, scratch.tmp(s));
        dy = scratch.tmp(s);
      }
      T* img = image + n0 * C * p.IS + grp * p.Cg * p.IS;
      if (p.direct) {
        gemm<T>(true, false, p.Cg, p.P, p.Mg, T(1), w, p.K, dy, p.P, T(0), img, p.P, pool);
        continue;
      }
      gemm<T>(true, false, p.K, ld, p.Mg, T(1), w, p.K, dy, ld, T(0), col, ld, pool);
      for (int64_t b = 0; b < count; ++b) {
        T* img_b = img + b * C * p.IS;
        std::fill(img_b, img_b + p.Cg * p.IS, T(0));
        col2im(g, col + b * p.P, ld, p.Cg, img_b);
      }
    }
    if (bias)
      for (int64_t b = 0; b < count; ++b)
        for (int64_t c = 0; c < C; ++c) {
          T* plane = image + ((n0 + b) * C + c) * p.IS;
          const T add = bias[c];
          for (int64_t i = 0; i < p.IS; ++i) plane[i] += add;
        }
  });
}

template <typename T>
void conv_weight_grad(KernelContext& ctx, const ConvGeometry& g, const T* image, const T* cols, T* weight) {
  ThreadPool& pool = ctx.threads();
  const ConvPlan p = plan_conv(pool, g, sizeof(T));
  const int64_t C = g.image_channels, M = g.col_channels, w_numel = M * p.K;
  // Slot 0 accumulates straight into the output, the others into scratch summed at the end.
  const size_t acc_bytes = aligned_bytes(w_numel, sizeof(T));
  const SlotScratch<T> scratch(ctx, p, acc_bytes * static_cast<size_t>(p.slots - 1));
  auto accumulator = [&](int64_t s) {
    return s == 0 ? weight : reinterpret_cast<T*>(scratch.extra() + acc_bytes * static_cast<size_t>(s - 1));
  };
  if (g.batch == 0) std::fill(weight, weight + w_numel, T(0));
  for_each_chunk(pool, g.batch, p, [&](int64_t s, int64_t n0, int64_t count, bool first) {
    T* col = scratch.col(s);
    T* acc = accumulator(s);
    const int64_t ld = count * p.P;
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const T* dy = cols + n0 * M * p.P + grp * p.Mg * p.P;
      if (p.chunk > 1) {
        gather(cols + n0 * M * p.P, M, grp * p.Mg, p.Mg, p.P, count, scratch.tmp(s));
        dy = scratch.tmp(s);
      }
      const T* rhs = image + n0 * C * p.IS + grp * p.Cg * p.IS;
      if (!p.direct) {
        for (int64_t b = 0; b < count; ++b) im2col(g, rhs + b * C * p.IS, p.Cg, col + b * p.P, ld);
        rhs = col;
      }
      gemm<T>(false, true, p.Mg, p.K, ld, T(1), dy, ld, rhs, ld, first ? T(0) : T(1), acc + grp * p.Mg * p.K, p.K,
              pool);
    }
  });
  if (p.slots > 1) {
    pool.parallel_for(w_numel, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t s = 1; s < p.slots; ++s) {
        const T* a = accumulator(s);
        for (int64_t i = b; i < e; ++i) weight[i] += a[i];
      }
    });
  }
}

#define OT_CONV_INSTANTIATE(T)                                                                                \
  template void conv_image_to_cols<T>(KernelContext&, const ConvGeometry&, const T*, const T*, const T*, T*); \
  template void conv_cols_to_image<T>(KernelContext&, const ConvGeometry&, const T*, const T*, const T*, T*); \
  template void conv_weight_grad<T>(KernelContext&, const ConvGeometry&, const T*, const T*, T*);
OT_CONV_INSTANTIATE(float)
OT_CONV_INSTANTIATE(double)
#undef OT_CONV_INSTANTIATE

}  // namespace onnxtrain
