#include "ops/nn/resize_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/common/elementwise.h"
#include "runtime/thread_pool.h"

namespace onnxtrain::resize {
namespace {

int taps_of(Mode m) { return m == Mode::Nearest ? 1 : m == Mode::Linear ? 2 : 4; }

// Source coordinate of output position x along one axis (ONNX's coordinate_transformation_mode).
double source_coord(const Options& o, const Geometry& g, int a, double x) {
  const double in = static_cast<double>(g.in[a]), len = g.out_length[a], s = g.scale[a];
  const bool single = g.out[a] <= 1;  // "length_resized > 1 ? ... : ..." in the spec
  switch (o.coord) {
    case Coord::HalfPixel: return (x + 0.5) / s - 0.5;
    case Coord::PytorchHalfPixel: return single ? 0.0 : (x + 0.5) / s - 0.5;
    case Coord::AlignCorners: return single ? 0.0 : x * (in - 1) / (len - 1);
    case Coord::Asymmetric: return x / s;
    case Coord::TfHalfPixelForNn: return (x + 0.5) / s;
    case Coord::TfCropAndResize: {
      const double st = g.roi_start[a], en = g.roi_end[a];
      return single ? 0.5 * (st + en) * (in - 1) : st * (in - 1) + x * (en - st) * (in - 1) / (len - 1);
    }
  }
  return x;
}

// A source coordinate as an index. Extreme roi or scales put coordinates far outside the input
// (or at NaN), where a plain cast is undefined; every caller clamps the index into the input, so
// saturating here changes no in-range result.
int64_t to_index(double x) {
  constexpr double kLimit = 4.0e18;
  if (!(x > -kLimit)) return static_cast<int64_t>(-kLimit);  // NaN lands here too
  if (x > kLimit) return static_cast<int64_t>(kLimit);
  return static_cast<int64_t>(x);
}

int64_t round_nearest(Rounding r, double x) {
  switch (r) {
    case Rounding::RoundPreferFloor: return to_index(std::ceil(x - 0.5));
    case Rounding::RoundPreferCeil: return to_index(std::floor(x + 0.5));
    case Rounding::Floor: return to_index(std::floor(x));
    case Rounding::Ceil: return to_index(std::ceil(x));
  }
  return 0;
}

// Keys' cubic convolution weights for taps floor(x) - 1 ... floor(x) + 2, t = x - floor(x).
void cubic_weights(double t, double A, double* w) {
  auto near = [A](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };            // |d| <= 1
  auto far = [A](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };        // 1 < |d| < 2
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

struct AxisTaps {
  int k = 1;
  int64_t* idx = nullptr;
  void* w = nullptr;  // T[out * k]
  uint8_t* outside = nullptr;
  bool identity = false, any_outside = false;
};

template <typename T>
void build_taps(const Options& o, const Geometry& g, int a, AxisTaps& t) {
  const int64_t in = g.in[a], out = g.out[a];
  const int k = t.k;
  T* w = static_cast<T*>(t.w);
  bool identity = in == out;
  for (int64_t j = 0; j < out; ++j) {
    const double x = source_coord(o, g, a, static_cast<double>(j));
    int64_t* ij = t.idx + j * k;
    T* wj = w + j * k;
    const bool outside = o.coord == Coord::TfCropAndResize && (x < 0 || x > static_cast<double>(in - 1));
    t.outside[j] = outside;
    if (outside) {
      t.any_outside = true;
      identity = false;
      std::fill(ij, ij + k, 0);
      std::fill(wj, wj + k, T(0));
      continue;
    }
    double wd[4] = {1, 0, 0, 0};
    int64_t first;
    if (o.mode == Mode::Nearest) {
      first = round_nearest(o.rounding, x);
    } else {
      // Linear: PyTorch clamps a negative source coordinate to 0 and still reads the next
      // element with weight 0, so that an Inf or NaN there gives NaN as in eager. For finite
      // values this is the spec's edge padding.
      const double xs = o.mode == Mode::Linear && x < 0 ? 0.0 : x;
      const double f = std::floor(xs);
      const double frac = xs - f;
      if (o.mode == Mode::Linear) {
        first = to_index(f);
        wd[0] = 1 - frac;
        wd[1] = frac;
      } else {
        first = to_index(f) - 1;
        cubic_weights(frac, o.cubic_a, wd);
      }
    }
    if (o.exclude_outside) {
      double sum = 0;
      for (int q = 0; q < k; ++q) {
        if (first + q < 0 || first + q >= in) wd[q] = 0;
        sum += wd[q];
      }
      for (int q = 0; q < k; ++q) wd[q] = sum != 0 ? wd[q] / sum : 0;
    }
    // Taps past the edges read the edge value (the reference pads with 'edge').
    double self = 0;
    for (int q = 0; q < k; ++q) {
      ij[q] = std::clamp<int64_t>(first + q, 0, in - 1);
      wj[q] = static_cast<T>(wd[q]);
      if (ij[q] == j) self += wd[q];
      else if (wd[q] != 0) identity = false;
    }
    if (self != 1) identity = false;
  }
  t.identity = identity;
}

// out[o, j, i] = sum_q w[j, q] * in[o, idx[j, q], i], K taps.
template <int K, typename T>
void gather_pass(ThreadPool& pool, const T* in, T* out, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner,
                 const AxisTaps& t) {
  const T* w = static_cast<const T*>(t.w);
  const int64_t* idx = t.idx;
  if (inner == 1) {  // the last axis: one gather per output, rows of out_len per task
    pool.parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(out_len * K, 1)),
                      [=](int64_t o0, int64_t o1) {
                        for (int64_t o = o0; o < o1; ++o) {
                          const T* base = in + o * in_len;
                          T* dst = out + o * out_len;
                          for (int64_t j = 0; j < out_len; ++j) {
                            T s = 0;
                            for (int q = 0; q < K; ++q) s += w[j * K + q] * base[idx[j * K + q]];
                            dst[j] = s;
                          }
                        }
                      });
    return;
  }
  pool.parallel_for(outer * out_len, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner * K, 1)),
                    [=](int64_t r0, int64_t r1) {
                      int64_t o = r0 / out_len, j = r0 % out_len;
                      for (int64_t r = r0; r < r1; ++r) {
                        const T* base = in + o * in_len * inner;
                        T* dst = out + r * inner;
                        const T* src0 = base + idx[j * K] * inner;
                        const T w0 = w[j * K];
                        for (int64_t i = 0; i < inner; ++i) dst[i] = w0 * src0[i];
                        for (int q = 1; q < K; ++q) {
                          const T* src = base + idx[j * K + q] * inner;
                          const T wq = w[j * K + q];
                          for (int64_t i = 0; i < inner; ++i) dst[i] += wq * src[i];
                        }
                        if (++j == out_len) {
                          j = 0;
                          ++o;
                        }
                      }
                    });
}

// The transpose: in[o, idx[j, q], i] += w[j, q] * out[o, j, i], `in` zeroed first. Tasks own
// whole (o, inner-chunk) slices, so no two write the same element and sums keep their order.
template <int K, typename T>
void scatter_pass(ThreadPool& pool, const T* out, T* in, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner,
                  const AxisTaps& t) {
  const T* w = static_cast<const T*>(t.w);
  const int64_t* idx = t.idx;
  if (inner == 1) {
    pool.parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(out_len * K, 1)),
                      [=](int64_t o0, int64_t o1) {
                        for (int64_t o = o0; o < o1; ++o) {
                          T* ib = in + o * in_len;
                          const T* ob = out + o * out_len;
                          std::fill(ib, ib + in_len, T(0));
                          for (int64_t j = 0; j < out_len; ++j)
                            for (int q = 0; q < K; ++q) ib[idx[j * K + q]] += w[j * K + q] * ob[j];
                        }
                      });
    return;
  }
  const int64_t chunk = (outer >= 16 || inner < 1024) ? inner : std::max<int64_t>(256, (inner + 15) / 16);
  const int64_t chunks = inner == 0 ? 1 : (inner + chunk - 1) / chunk;
  pool.parallel_for(outer * chunks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(out_len * chunk * K, 1)),
                    [=](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        const int64_t o = r / chunks, i0 = (r % chunks) * chunk, n = std::min(chunk, inner - i0);
                        T* ib = in + o * in_len * inner + i0;
                        const T* ob = out + o * out_len * inner + i0;
                        for (int64_t l = 0; l < in_len; ++l) std::fill(ib + l * inner, ib + l * inner + n, T(0));
                        for (int64_t j = 0; j < out_len; ++j) {
                          const T* src = ob + j * inner;
                          for (int q = 0; q < K; ++q) {
                            const T wq = w[j * K + q];
                            T* dst = ib + idx[j * K + q] * inner;
                            for (int64_t i = 0; i < n; ++i) dst[i] += wq * src[i];
                          }
                        }
                      }
                    });
}

// Runs the pass with the tap count as a compile-time constant.
template <typename T, bool kGather>
void run_pass(ThreadPool& pool, const T* src, T* dst, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner,
              const AxisTaps& t) {
  switch (t.k) {
    case 1: return kGather ? gather_pass<1>(pool, src, dst, outer, in_len, out_len, inner, t)
                           : scatter_pass<1>(pool, src, dst, outer, in_len, out_len, inner, t);
    case 2: return kGather ? gather_pass<2>(pool, src, dst, outer, in_len, out_len, inner, t)
                           : scatter_pass<2>(pool, src, dst, outer, in_len, out_len, inner, t);
    default: return kGather ? gather_pass<4>(pool, src, dst, outer, in_len, out_len, inner, t)
                            : scatter_pass<4>(pool, src, dst, outer, in_len, out_len, inner, t);
  }
}

// Sets out[o, j, :] = value for every j outside the input along axis a (shape `shape`).
template <typename T>
void fill_outside(const TensorShape& shape, int a, const AxisTaps& t, T* data, T value) {
  const int64_t outer = shape.size_between(0, a), len = shape[a], inner = shape.size_between(a + 1, shape.rank());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < len; ++j)
      if (t.outside[j]) std::fill(data + (o * len + j) * inner, data + (o * len + j + 1) * inner, value);
}

// Intermediate shape after the passes over axes [0, a).
TensorShape shape_after(const Geometry& g, int a) {
  TensorShape s = g.in;
  for (int d = 0; d < a; ++d) s[d] = g.out[d];
  return s;
}

// One scratch block: the taps of every axis, two ping-pong buffers for the intermediate shapes,
// and for tf_crop_and_resize a copy of dY with the extrapolated positions zeroed.
struct Carved {
  std::array<AxisTaps, TensorShape::kMaxRank> taps;
  void* buf[2] = {nullptr, nullptr};
  void* masked = nullptr;
};

size_t carve(const Options& o, const Geometry& g, size_t es, uint8_t* base, Carved* c) {
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off += (bytes + 63) / 64 * 64;
    return p;
  };
  const int k = taps_of(o.mode);
  const int r = g.in.rank();
  for (int a = 0; a < r; ++a) {
    const size_t out = static_cast<size_t>(g.out[a]);
    AxisTaps& t = c->taps[static_cast<size_t>(a)];
    t.k = k;
    t.idx = static_cast<int64_t*>(take(out * static_cast<size_t>(k) * sizeof(int64_t)));
    t.w = take(out * static_cast<size_t>(k) * es);
    t.outside = static_cast<uint8_t*>(take(out));
  }
  int64_t mid = 0;
  for (int a = 1; a < r; ++a) mid = std::max(mid, shape_after(g, a).numel());
  c->buf[0] = take(static_cast<size_t>(mid) * es);
  c->buf[1] = take(static_cast<size_t>(mid) * es);
  if (o.coord == Coord::TfCropAndResize) c->masked = take(static_cast<size_t>(g.out.numel()) * es);
  return off;
}

// Builds the taps; returns the axes that are not the identity, in order.
template <typename T>
int prepare(const Options& o, const Geometry& g, void* scratch, Carved& c, std::array<int, TensorShape::kMaxRank>& active) {
  carve(o, g, sizeof(T), static_cast<uint8_t*>(scratch), &c);
  int n = 0;
  for (int a = 0; a < g.in.rank(); ++a) {
    build_taps<T>(o, g, a, c.taps[static_cast<size_t>(a)]);
    if (!c.taps[static_cast<size_t>(a)].identity) active[static_cast<size_t>(n++)] = a;
  }
  return n;
}

}  // namespace

Geometry make_geometry(const Options& o, const TensorShape& in, const std::vector<double>& scales,
                       const std::vector<int64_t>& sizes, const std::vector<double>& roi) {
  const int r = in.rank();
  OT_CHECK(scales.empty() != sizes.empty(), "exactly one of scales and sizes must be given (and non-empty), got ",
           scales.size(), " scales and ", sizes.size(), " sizes");
  const std::vector<double>& given = scales;
  OT_CHECK(static_cast<int>(given.empty() ? sizes.size() : given.size()) == r, given.empty() ? "sizes" : "scales",
           " must have one value per dimension of X ", in.str());
  const bool crop = o.coord == Coord::TfCropAndResize;
  if (crop && !roi.empty())
    OT_CHECK(static_cast<int>(roi.size()) == 2 * r, "roi must have 2 * rank(X) = ", 2 * r, " values, got ", roi.size());
  Geometry g;
  g.in = in;
  g.out = in;
  for (int a = 0; a < r; ++a) {
    g.roi_start[a] = crop && !roi.empty() ? roi[static_cast<size_t>(a)] : 0.0;
    g.roi_end[a] = crop && !roi.empty() ? roi[static_cast<size_t>(r + a)] : 1.0;
    const double in_d = static_cast<double>(in[a]);
    if (!scales.empty()) {
      const double s = scales[static_cast<size_t>(a)];
      OT_CHECK(s > 0, "scales must be positive, got ", s, " for axis ", a);
      g.scale[a] = s;
      g.out_length[a] = in_d * s * (g.roi_end[a] - g.roi_start[a]);
      OT_CHECK(g.out_length[a] >= 0 && g.out_length[a] < 9.2e18, "scale ", s, " and roi [", g.roi_start[a], ", ",
               g.roi_end[a], "] give axis ", a, " of X ", in.str(), " no valid output size");
      g.out[a] = static_cast<int64_t>(std::floor(g.out_length[a]));
    } else {
      OT_CHECK(sizes[static_cast<size_t>(a)] >= 0, "sizes must be non-negative, got ", sizes[static_cast<size_t>(a)]);
      g.out[a] = sizes[static_cast<size_t>(a)];
      g.out_length[a] = static_cast<double>(g.out[a]);
      g.scale[a] = in[a] > 0 ? g.out_length[a] / in_d : 1.0;
    }
    OT_CHECK(in[a] > 0 || g.out[a] == 0, "cannot resize the empty axis ", a, " of X ", in.str(), " to size ", g.out[a]);
  }
  return g;
}

size_t scratch_bytes(const Options& o, const Geometry& g, size_t elem_size) {
  Carved c;
  return carve(o, g, elem_size, nullptr, &c);
}

template <typename T>
void forward(ThreadPool& pool, const Options& o, const Geometry& g, const T* x, T* y, void* scratch) {
  if (g.out.numel() == 0) return;
  Carved c;
  std::array<int, TensorShape::kMaxRank> active{};
  const int na = prepare<T>(o, g, scratch, c, active);
  if (na == 0) std::memcpy(y, x, static_cast<size_t>(g.out.numel()) * sizeof(T));
  const T* src = x;
  for (int p = 0; p < na; ++p) {
    const int a = active[static_cast<size_t>(p)];
    const TensorShape cur = shape_after(g, a);
    T* dst = p == na - 1 ? y : static_cast<T*>(c.buf[p % 2]);
    run_pass<T, true>(pool, src, dst, cur.size_between(0, a), g.in[a], g.out[a], cur.size_between(a + 1, cur.rank()),
                      c.taps[static_cast<size_t>(a)]);
    src = dst;
  }
  for (int a = 0; a < g.in.rank(); ++a)
    if (c.taps[static_cast<size_t>(a)].any_outside)
      fill_outside(g.out, a, c.taps[static_cast<size_t>(a)], y, static_cast<T>(o.extrapolation));
}

template <typename T>
void backward(ThreadPool& pool, const Options& o, const Geometry& g, const T* dy, T* dx, void* scratch) {
  const int64_t n_in = g.in.numel();
  if (n_in == 0) return;
  if (g.out.numel() == 0) {
    std::fill(dx, dx + n_in, T(0));
    return;
  }
  Carved c;
  std::array<int, TensorShape::kMaxRank> active{};
  const int na = prepare<T>(o, g, scratch, c, active);
  const T* src = dy;
  for (int a = 0; a < g.in.rank(); ++a) {
    if (!c.taps[static_cast<size_t>(a)].any_outside) continue;
    T* masked = static_cast<T*>(c.masked);
    if (src != masked) std::memcpy(masked, dy, static_cast<size_t>(g.out.numel()) * sizeof(T));
    fill_outside(g.out, a, c.taps[static_cast<size_t>(a)], masked, T(0));
    src = masked;
  }
  if (na == 0) std::memcpy(dx, src, static_cast<size_t>(n_in) * sizeof(T));
  for (int p = na - 1; p >= 0; --p) {
    const int a = active[static_cast<size_t>(p)];
    const TensorShape cur = shape_after(g, a);
    T* dst = p == 0 ? dx : static_cast<T*>(c.buf[p % 2]);
    run_pass<T, false>(pool, src, dst, cur.size_between(0, a), g.in[a], g.out[a], cur.size_between(a + 1, cur.rank()),
                       c.taps[static_cast<size_t>(a)]);
    src = dst;
  }
}

template void forward<float>(ThreadPool&, const Options&, const Geometry&, const float*, float*, void*);
template void forward<double>(ThreadPool&, const Options&, const Geometry&, const double*, double*, void*);
template void backward<float>(ThreadPool&, const Options&, const Geometry&, const float*, float*, void*);
template void backward<double>(ThreadPool&, const Options&, const Geometry&, const double*, double*, void*);

std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.item_as_double(i);
  return v;
}

}  // namespace onnxtrain::resize
