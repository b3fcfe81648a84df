#include "ops/nn/conv_depthwise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "opdef/kernel.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace onnxtrain {
namespace {

// Channel blocks: kLanes consecutive output channels side by side in one 64-byte vector, so that
// each kernel tap is one vector multiply-add whatever the stride, dilation, padding or plane size.
// (Vectors along W wasted most of their lanes on MobileNet's 4x4 and 7x7 planes, and strided taps
// had no vector form at all: those convolutions ran at 2-3 GFLOP/s.)
template <typename T>
struct Lanes {
  static constexpr int64_t kCount = 64 / static_cast<int64_t>(sizeof(T));
  typedef T Vec __attribute__((vector_size(64)));
  static Vec load(const T* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, Vec v) { std::memcpy(p, &v, sizeof v); }
};

// The first n < kCount elements of p, the other lanes zero; and the converse store.
template <typename T>
typename Lanes<T>::Vec load_first(const T* p, int64_t n) {
#if defined(__AVX512F__)
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  if constexpr (sizeof(T) == 4) return reinterpret_cast<typename Lanes<T>::Vec>(_mm512_maskz_loadu_ps(mask, p));
  else return reinterpret_cast<typename Lanes<T>::Vec>(_mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p));
#else
  typename Lanes<T>::Vec v{};
  for (int64_t j = 0; j < n; ++j) v[j] = p[j];
  return v;
#endif
}

template <typename T>
void store_first(T* p, typename Lanes<T>::Vec v, int64_t n) {
#if defined(__AVX512F__)
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  if constexpr (sizeof(T) == 4) _mm512_mask_storeu_ps(p, mask, reinterpret_cast<__m512>(v));
  else _mm512_mask_storeu_pd(p, static_cast<__mmask8>(mask), reinterpret_cast<__m512d>(v));
#else
  for (int64_t j = 0; j < n; ++j) p[j] = v[j];
#endif
}

// The lane of the concatenation (a, b) that element j of one transpose round's result takes
// (see transpose_tile): the low result keeps a's first half of each 2S block and takes b's first,
// the high result takes a's second half and keeps b's.
template <int64_t L, int64_t S, bool kHigh>
constexpr int lane_source(int64_t j) {
  return static_cast<int>(kHigh ? ((j & S) == 0 ? j + S : L + j) : ((j & S) == 0 ? j : L + j - S));
}

// __builtin_shufflevector (GCC 12 and clang alike) wants its lane indices as constants, one
// argument each: the index sequence spells them out.
template <int64_t L, int64_t S, bool kHigh, typename Vec, size_t... J>
__attribute__((always_inline)) inline Vec shuffle_round(Vec a, Vec b, std::index_sequence<J...>) {
  return __builtin_shufflevector(a, b, lane_source<L, S, kHigh>(static_cast<int64_t>(J))...);
}

template <typename T, int64_t S>
__attribute__((always_inline)) inline void transpose_round(typename Lanes<T>::Vec* rows) {
  constexpr int64_t L = Lanes<T>::kCount;
  constexpr auto lanes = std::make_index_sequence<static_cast<size_t>(L)>();
  for (int64_t i = 0; i < L; ++i) {
    if (i & S) continue;
    const typename Lanes<T>::Vec a = rows[i], b = rows[i + S];
    rows[i] = shuffle_round<L, S, false>(a, b, lanes);
    rows[i + S] = shuffle_round<L, S, true>(a, b, lanes);
  }
  if constexpr (S > 1) transpose_round<T, S / 2>(rows);
}

// Transposes the kCount x kCount tile `rows` in place (element j of row i trades places with
// element i of row j): log2(kCount) rounds, each swapping the off-diagonal s x s blocks of every
// 2s x 2s block, two shuffles per pair of rows. (Scalar copies between planes and channel blocks
// cost more than the convolution itself.)
template <typename T>
__attribute__((always_inline)) inline void transpose_tile(typename Lanes<T>::Vec* rows) {
  transpose_round<T, Lanes<T>::kCount / 2>(rows);
}

// dst[(first + i) * kCount + l] = planes[l][first + i] for i < count, lanes past `lanes` zero:
// planes side by side as channel blocks.
template <typename T>
void planes_to_block(const T* const* planes, int64_t lanes, int64_t first, int64_t count, T* dst) {
  using A = Lanes<T>;
  constexpr int64_t L = A::kCount;
  for (int64_t i = 0; i < count; i += L) {
    const int64_t n = std::min(L, count - i);
    typename A::Vec tile[L] = {};
    for (int64_t l = 0; l < lanes; ++l) tile[l] = n == L ? A::load(planes[l] + first + i) : load_first(planes[l] + first + i, n);
    transpose_tile<T>(tile);
    for (int64_t k = 0; k < n; ++k) A::store(dst + (i + k) * L, tile[k]);
  }
}

// The inverse: planes[l][first + i] = src[i * kCount + l] (or += where add[l]) for l < lanes.
template <typename T>
void block_to_planes(const T* src, int64_t count, T* const* planes, const bool* add, int64_t lanes, int64_t first) {
  using A = Lanes<T>;
  constexpr int64_t L = A::kCount;
  for (int64_t i = 0; i < count; i += L) {
    const int64_t n = std::min(L, count - i);
    typename A::Vec tile[L] = {};
    for (int64_t k = 0; k < n; ++k) tile[k] = A::load(src + (i + k) * L);
    transpose_tile<T>(tile);
    for (int64_t l = 0; l < lanes; ++l) {
      T* out = planes[l] + first + i;
      if (n == L) {
        A::store(out, add[l] ? A::load(out) + tile[l] : tile[l]);
      } else {
        store_first(out, add[l] ? load_first(out, n) + tile[l] : tile[l], n);
      }
    }
  }
}

// The layouts of one (image, channel block): the image side zero-padded, [position][lane], where a
// position runs over the padded extents (so that no tap ever tests an edge); the column side
// (Y, dY) [output position][lane]. Lane l of block b is output channel b * kLanes + l; the image
// side holds the input channel that output channel reads (channel multipliers repeat it).
template <typename T>
struct Blocks {
  static constexpr int64_t kLanes = Lanes<T>::kCount;
  using Vec = typename Lanes<T>::Vec;

  explicit Blocks(const ConvGeometry& geometry) : g(geometry) {
    M = g.col_channels;
    C = g.image_channels;
    per_input = M / C;
    count = ceil_div(M, kLanes);
    IS = g.in_size();
    OS = g.out_size();
    K = g.kernel_size();
    for (int i = 0; i < kMaxSpatial; ++i)
      extent[i] = g.out[i] == 0 ? 0 : (g.out[i] - 1) * g.stride[i] + (g.kernel[i] - 1) * g.dilation[i] + 1;
    padded = extent[0] * extent[1] * extent[2];
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
          taps.push_back((kd * g.dilation[0] * extent[1] + kh * g.dilation[1]) * extent[2] + kw * g.dilation[2]);
  }

  // The output channel of a lane, or -1 past the last channel.
  int64_t channel(int64_t block, int64_t lane) const {
    const int64_t m = block * kLanes + lane;
    return m < M ? m : -1;
  }
  int64_t lanes_of(int64_t block) const { return std::min(kLanes, M - block * kLanes); }

  // fn(first output position of the row, padded position that output's first tap reads, stride
  // along the row in positions) for every output row.
  template <typename Fn>
  void for_each_row(Fn fn) const {
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        fn((od * g.out[1] + oh) * g.out[2], (od * g.stride[0] * extent[1] + oh * g.stride[1]) * extent[2], g.stride[2]);
  }

  // dst [padded][lane] = the padded input planes that the block's output channels read, of image n.
  void load_image(const T* x, int64_t n, int64_t block, T* dst) const {
    zero_padding(dst);
    const T* planes[kLanes];
    const int64_t lanes = lanes_of(block);
    for (int64_t l = 0; l < lanes; ++l) planes[l] = x + (n * C + channel(block, l) / per_input) * IS;
    for_each_input_row([&](int64_t in_pos, int64_t pad_pos, int64_t w0, int64_t w1) {
      planes_to_block(planes, lanes, in_pos + w0, w1 - w0, dst + (pad_pos + w0) * kLanes);
    });
  }

  // The inverse of load_image for a gradient: input planes of image n from src [padded][lane];
  // where several output channels read one input channel (a channel multiplier), their parts add.
  void store_image(const T* src, int64_t n, int64_t block, T* dx) const {
    T* planes[kLanes];
    bool add[kLanes];
    const int64_t lanes = lanes_of(block);
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t m = channel(block, l);
      planes[l] = dx + (n * C + m / per_input) * IS;
      add[l] = m % per_input != 0;
    }
    for_each_input_row([&](int64_t in_pos, int64_t pad_pos, int64_t w0, int64_t w1) {
      block_to_planes(src + (pad_pos + w0) * kLanes, w1 - w0, planes, add, lanes, in_pos + w0);
    });
  }

  // dst [OS][lane] = the block's channels of y's image n.
  void load_cols(const T* y, int64_t n, int64_t block, T* dst) const {
    const T* planes[kLanes];
    const int64_t lanes = lanes_of(block);
    for (int64_t l = 0; l < lanes; ++l) planes[l] = y + (n * M + channel(block, l)) * OS;
    planes_to_block(planes, lanes, 0, OS, dst);
  }

  void store_cols(const T* src, int64_t n, int64_t block, T* y) const {
    T* planes[kLanes];
    const bool add[kLanes] = {};
    const int64_t lanes = lanes_of(block);
    for (int64_t l = 0; l < lanes; ++l) planes[l] = y + (n * M + channel(block, l)) * OS;
    block_to_planes(src, OS, planes, add, lanes, 0);
  }

  // dst [K][lane]: the block's weights (W is [M, 1, taps...]).
  void load_weights(const T* w, int64_t block, T* dst) const {
    std::fill(dst, dst + K * kLanes, T(0));
    for (int64_t l = 0; l < lanes_of(block); ++l)
      for (int64_t t = 0; t < K; ++t) dst[t * kLanes + l] = w[channel(block, l) * K + t];
  }

  // Zeroes the positions of a padded image that load_image does not write: every position outside
  // the rows and columns the input lands on.
  void zero_padding(T* dst) const {
    const int64_t row = extent[2] * kLanes;
    const int64_t w0 = std::clamp<int64_t>(g.pad_begin[2], 0, extent[2]);
    const int64_t w1 = std::clamp<int64_t>(g.pad_begin[2] + g.in[2], w0, extent[2]);
    for (int64_t pd = 0; pd < extent[0]; ++pd) {
      const bool plane_in = pd >= g.pad_begin[0] && pd < g.pad_begin[0] + g.in[0];
      for (int64_t ph = 0; ph < extent[1]; ++ph) {
        T* r = dst + (pd * extent[1] + ph) * row;
        if (plane_in && ph >= g.pad_begin[1] && ph < g.pad_begin[1] + g.in[1]) {
          std::fill(r, r + w0 * kLanes, T(0));
          std::fill(r + w1 * kLanes, r + row, T(0));
        } else {
          std::fill(r, r + row, T(0));
        }
      }
    }
  }

  const ConvGeometry& g;
  int64_t M, C, per_input, count, IS, OS, K, padded;
  std::array<int64_t, kMaxSpatial> extent{};
  std::vector<int64_t> taps;  // each tap's offset from its output's first tap, in padded positions

 private:
  // fn(input position of a row's first element, padded position of that element, [w0, w1) the
  // row's elements that lie inside the padded extents) for every input row inside them.
  template <typename Fn>
  void for_each_input_row(Fn fn) const {
    const int64_t w0 = std::max<int64_t>(0, -g.pad_begin[2]);
    const int64_t w1 = std::min<int64_t>(g.in[2], extent[2] - g.pad_begin[2]);
    if (w0 >= w1) return;
    for (int64_t d = 0; d < g.in[0]; ++d) {
      const int64_t pd = d + g.pad_begin[0];
      if (pd < 0 || pd >= extent[0]) continue;
      for (int64_t h = 0; h < g.in[1]; ++h) {
        const int64_t ph = h + g.pad_begin[1];
        if (ph < 0 || ph >= extent[1]) continue;
        fn((d * g.in[1] + h) * g.in[2], (pd * extent[1] + ph) * extent[2] + g.pad_begin[2], w0, w1);
      }
    }
  }
};

// Runs fn(task, scratch, first) for every task in [0, count): each of the pool's threads takes a
// contiguous run of tasks and a slot of `elements` elements of the kernel's scratch of its own;
// `first` marks the first task of a run (the slot holds nothing of this call before it).
template <typename T, typename Fn>
void for_each_task(KernelContext& ctx, int64_t count, int64_t elements, Fn fn) {
  if (count <= 0) return;
  const int64_t slots = std::min<int64_t>(ctx.threads().num_threads(), count);
  const int64_t stride = (elements * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64;
  char* scratch = static_cast<char*>(ctx.scratch(static_cast<size_t>(slots * stride)));
  ctx.threads().parallel_for(slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      T* slot = reinterpret_cast<T*>(scratch + s * stride);
      const int64_t begin = count * s / slots, end = count * (s + 1) / slots;
      for (int64_t task = begin; task < end; ++task) fn(task, slot, task == begin);
    }
  });
}

}  // namespace

bool is_depthwise(const ConvGeometry& g) {
  return g.group == g.image_channels && g.col_channels % g.group == 0 && g.image_channels > 0 && g.group > 1;
}

// Tasks are (channel block, image), blocks outermost, so that a thread loads each block's weights
// once.
template <typename T>
void depthwise_forward(KernelContext& ctx, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  using A = Lanes<T>;
  using Vec = typename A::Vec;
  constexpr int64_t L = A::kCount;
  const Blocks<T> blk(g);
  if (blk.OS == 0 || g.batch == 0) return;
  const int64_t OW = g.out[2], K = blk.K, image = blk.padded * L, cols = blk.OS * L;
  const int64_t* taps = blk.taps.data();
  for_each_task<T>(ctx, blk.count * g.batch, image + cols + (K + 1) * L, [&](int64_t task, T* scratch, bool first) {
    const int64_t block = task / g.batch, n = task % g.batch;
    T* xb = scratch;
    T* yb = xb + image;
    T* wb = yb + cols;  // [K][lane] weights, then the bias
    T* bias_lanes = wb + K * L;
    if (first || n == 0) {  // a new block
      blk.load_weights(w, block, wb);
      for (int64_t l = 0; l < L; ++l) bias_lanes[l] = b && blk.channel(block, l) >= 0 ? b[blk.channel(block, l)] : T(0);
    }
    const Vec bias = A::load(bias_lanes);
    blk.load_image(x, n, block, xb);
    blk.for_each_row([&](int64_t o0, int64_t base, int64_t stride) {
      const T* row = xb + base * L;
      const int64_t step = stride * L;
      int64_t ow = 0;
      // Four outputs at a time: four independent sums hide the multiply-add latency.
      for (; ow + 4 <= OW; ow += 4) {
        Vec a0 = bias, a1 = bias, a2 = bias, a3 = bias;
        for (int64_t t = 0; t < K; ++t) {
          const Vec wt = A::load(wb + t * L);
          const T* p = row + (taps[t] + ow * stride) * L;
          a0 += wt * A::load(p);
          a1 += wt * A::load(p + step);
          a2 += wt * A::load(p + 2 * step);
          a3 += wt * A::load(p + 3 * step);
        }
        T* out = yb + (o0 + ow) * L;
        A::store(out, a0);
        A::store(out + L, a1);
        A::store(out + 2 * L, a2);
        A::store(out + 3 * L, a3);
      }
      for (; ow < OW; ++ow) {
        Vec a = bias;
        for (int64_t t = 0; t < K; ++t) a += A::load(wb + t * L) * A::load(row + (taps[t] + ow * stride) * L);
        A::store(yb + (o0 + ow) * L, a);
      }
    });
    blk.store_cols(yb, n, block, y);
  });
}

// The adjoint, tap by tap: each tap scatters w[tap] * dY into the padded gradient. Within one tap
// no two outputs touch the same position, so the additions never wait on one another.
template <typename T>
void depthwise_backward_data(KernelContext& ctx, const ConvGeometry& g, const T* dy, const T* w, T* dx) {
  using A = Lanes<T>;
  using Vec = typename A::Vec;
  constexpr int64_t L = A::kCount;
  const Blocks<T> blk(g);
  std::fill(dx, dx + g.batch * blk.C * blk.IS, T(0));  // inputs no output reads get no gradient
  if (blk.OS == 0 || g.batch == 0) return;
  const int64_t OW = g.out[2], K = blk.K, image = blk.padded * L, cols = blk.OS * L;
  auto run = [&](int64_t block, int64_t n, T* scratch) {
    T* dxb = scratch;
    T* dyb = dxb + image;
    T* wb = dyb + cols;
    blk.load_weights(w, block, wb);
    blk.load_cols(dy, n, block, dyb);
    std::fill(dxb, dxb + image, T(0));
    for (int64_t t = 0; t < K; ++t) {
      const Vec wt = A::load(wb + t * L);
      const int64_t tap = blk.taps[static_cast<size_t>(t)];
      blk.for_each_row([&](int64_t o0, int64_t base, int64_t stride) {
        T* row = dxb + (base + tap) * L;
        const T* d = dyb + o0 * L;
        for (int64_t ow = 0; ow < OW; ++ow) {
          T* p = row + ow * stride * L;
          A::store(p, A::load(p) + wt * A::load(d + ow * L));
        }
      });
    }
    blk.store_image(dxb, n, block, dx);
  };
  const int64_t elements = image + cols + K * L;
  if (blk.per_input > 1) {
    // With a channel multiplier, one input channel's outputs may fall in two blocks that add into
    // one plane: an image's blocks then run in one task, in order.
    for_each_task<T>(ctx, g.batch, elements, [&](int64_t n, T* scratch, bool) {
      for (int64_t block = 0; block < blk.count; ++block) run(block, n, scratch);
    });
  } else {
    for_each_task<T>(ctx, blk.count * g.batch, elements,
                     [&](int64_t task, T* scratch, bool) { run(task / g.batch, task % g.batch, scratch); });
  }
}

// dW[m, tap] = sum over images and outputs of dY * X at the tap. Each tap is a dot product over
// the image's outputs (four partial sums against the latency), accumulated in the element type
// over at most kFlushPositions outputs and in double beyond (converting every image's sums cost
// more than the products on 4x4 planes). Tasks own channel blocks; with fewer blocks than threads
// the images are split too, and the parts added at the end.
constexpr int64_t kFlushPositions = 4096;

template <typename T>
void depthwise_backward_weights(KernelContext& ctx, const ConvGeometry& g, const T* x, const T* dy, T* dw) {
  using A = Lanes<T>;
  using Vec = typename A::Vec;
  constexpr int64_t L = A::kCount;
  const Blocks<T> blk(g);
  const int64_t K = blk.K, OW = g.out[2], image = blk.padded * L, cols = blk.OS * L;
  const int64_t threads = ctx.threads().num_threads();
  const int64_t splits =
      blk.count >= threads ? 1 : std::max<int64_t>(1, std::min(g.batch, ceil_div(threads, blk.count)));
  std::vector<double> parts(static_cast<size_t>(splits * blk.count * K * L), 0.0);
  if (blk.OS > 0) {
    for_each_task<T>(ctx, splits * blk.count, image + cols + K * L, [&](int64_t task, T* scratch, bool) {
      const int64_t split = task / blk.count, block = task % blk.count;
      T* xb = scratch;
      T* dyb = xb + image;
      T* sums = dyb + cols;  // [K][lane], in the element type
      double* acc = parts.data() + task * K * L;
      auto flush = [&] {
        for (int64_t i = 0; i < K * L; ++i) acc[i] += static_cast<double>(sums[i]);
        std::fill(sums, sums + K * L, T(0));
      };
      std::fill(sums, sums + K * L, T(0));
      int64_t pending = 0;
      for (int64_t n = g.batch * split / splits; n < g.batch * (split + 1) / splits; ++n) {
        if (pending + blk.OS > kFlushPositions && pending > 0) {
          flush();
          pending = 0;
        }
        pending += blk.OS;
        blk.load_image(x, n, block, xb);
        blk.load_cols(dy, n, block, dyb);
        for (int64_t t = 0; t < K; ++t) {
          const int64_t tap = blk.taps[static_cast<size_t>(t)];
          Vec s0{}, s1{}, s2{}, s3{};
          blk.for_each_row([&](int64_t o0, int64_t base, int64_t stride) {
            const T* row = xb + (base + tap) * L;
            const T* d = dyb + o0 * L;
            const int64_t step = stride * L;
            int64_t ow = 0;
            for (; ow + 4 <= OW; ow += 4) {
              const T* p = row + ow * step;
              const T* q = d + ow * L;
              s0 += A::load(q) * A::load(p);
              s1 += A::load(q + L) * A::load(p + step);
              s2 += A::load(q + 2 * L) * A::load(p + 2 * step);
              s3 += A::load(q + 3 * L) * A::load(p + 3 * step);
            }
            for (; ow < OW; ++ow) s0 += A::load(d + ow * L) * A::load(row + ow * step);
          });
          A::store(sums + t * L, A::load(sums + t * L) + ((s0 + s1) + (s2 + s3)));
        }
      }
      flush();
    });
  }
  for (int64_t block = 0; block < blk.count; ++block)
    for (int64_t l = 0; l < blk.lanes_of(block); ++l)
      for (int64_t t = 0; t < K; ++t) {
        double sum = 0;
        for (int64_t split = 0; split < splits; ++split)
          sum += parts[static_cast<size_t>(((split * blk.count + block) * K + t) * L + l)];
        dw[blk.channel(block, l) * K + t] = static_cast<T>(sum);
      }
}

#define OT_DEPTHWISE(T)                                                                                         \
  template void depthwise_forward<T>(KernelContext&, const ConvGeometry&, const T*, const T*, const T*, T*);  \
  template void depthwise_backward_data<T>(KernelContext&, const ConvGeometry&, const T*, const T*, T*);       \
  template void depthwise_backward_weights<T>(KernelContext&, const ConvGeometry&, const T*, const T*, T*);
OT_DEPTHWISE(float)
OT_DEPTHWISE(double)
#undef OT_DEPTHWISE

}  // namespace onnxtrain
