#pragma once
// Shared pieces of the normalization kernels (BatchNormalization, LayerNormalization,
// InstanceNormalization): vectorizable row sums and the N x C x spatial view of a tensor.
//
// The channel functions take the data in its storage type S: float, double, or a 16-bit float
// (Half, BHalf) that is widened to float32 as it is read and rounded once as it is written, so a
// 16-bit tensor moves 2 bytes per element instead of a widened copy's 4 written and read again.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "core/tensor.h"
#include "ops/common/elementwise.h"
#include "runtime/thread_pool.h"

namespace onnxtrain::norm {

// Without -ffast-math the compiler keeps one floating-point accumulator in order and cannot
// vectorize a sum. Independent lanes it can: one 64-byte vector of partial sums in T within a
// block, and block totals in double, so long rows of float32 keep their precision.
//
// A summand is a function of an accessor `at`, where at(p) reads p at the current position: one
// element for the tail of a row, one vector of consecutive elements otherwise (GCC 12 did not turn
// elementwise reads into vector loads, and kept partial sums in memory: BatchNormGrad's sums ran
// at a fifth of the memory's speed). Write summands with arithmetic that works on both, such as
// `[&](auto at) { auto d = at(x) - m; return d * d; }`.
inline constexpr int64_t kBlock = 2048;

using onnxtrain::ComputeType;  // float for 16-bit storage S, else S (core/half.h)

template <typename T>
struct Lanes {
  static constexpr int64_t kCount = 64 / static_cast<int64_t>(sizeof(T));
  typedef T Vec __attribute__((vector_size(64)));
  static T total(Vec v) {
    T t = 0;
    for (int64_t k = 0; k < kCount; ++k) t += v[k];
    return t;
  }
};

// An accessor reads T, or a 16-bit float widened to T = float.
template <typename T>
struct ElementAt {
  int64_t i;
  T operator()(const T* p) const { return p[i]; }
  template <typename S, typename = std::enable_if_t<kIs16BitFloat<S>>>
  T operator()(const S* p) const {
    return widened_from(p[i]);
  }
};

template <typename T>
struct VectorAt {
  int64_t i;
  typename Lanes<T>::Vec operator()(const T* p) const {
    typename Lanes<T>::Vec v;
    std::memcpy(&v, p + i, sizeof v);
    return v;
  }
  // bfloat16 is float32's top half: widen the bits as integers, then view them as floats.
  typename Lanes<T>::Vec operator()(const BHalf* p) const {
    static_assert(std::is_same_v<T, float>, "16-bit storage computes in float");
    typedef uint16_t Bits16 __attribute__((vector_size(32)));  // float's 16 lanes
    typedef uint32_t Bits32 __attribute__((vector_size(64)));
    Bits16 narrow;
    std::memcpy(&narrow, p + i, sizeof narrow);
    const Bits32 wide = __builtin_convertvector(narrow, Bits32) << 16;
    typename Lanes<T>::Vec v;
    std::memcpy(&v, &wide, sizeof v);
    return v;
  }
  typename Lanes<T>::Vec operator()(const Half* p) const {
    static_assert(std::is_same_v<T, float>, "16-bit storage computes in float");
    typename Lanes<T>::Vec v{};
    for (int64_t k = 0; k < Lanes<T>::kCount; ++k) v[k] = widened_to_float(p[i + k]);
    return v;
  }
};

// Sum of f over [0, n).
template <typename T, typename F>
double row_sum(int64_t n, F f) {
  using L = Lanes<T>;
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    typename L::Vec acc{}, acc2{};  // two, so that consecutive additions do not wait on each other
    int64_t i = b;
    for (; i + 2 * L::kCount <= e; i += 2 * L::kCount) {
      acc += f(VectorAt<T>{i});
      acc2 += f(VectorAt<T>{i + L::kCount});
    }
    for (; i + L::kCount <= e; i += L::kCount) acc += f(VectorAt<T>{i});
    T tail = 0;
    for (; i < e; ++i) tail += f(ElementAt<T>{i});
    total += static_cast<double>(tail + L::total(acc + acc2));
  }
  return total;
}

// Two sums at once over [0, n): sa += fa, sb += fb, reading the data once.
template <typename T, typename FA, typename FB>
void row_sum2(int64_t n, FA fa, FB fb, double& sa, double& sb) {
  using L = Lanes<T>;
  sa = 0;
  sb = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    typename L::Vec acc_a{}, acc_b{}, acc_a2{}, acc_b2{};
    int64_t i = b;
    for (; i + 2 * L::kCount <= e; i += 2 * L::kCount) {
      acc_a += fa(VectorAt<T>{i});
      acc_b += fb(VectorAt<T>{i});
      acc_a2 += fa(VectorAt<T>{i + L::kCount});
      acc_b2 += fb(VectorAt<T>{i + L::kCount});
    }
    acc_a += acc_a2;
    acc_b += acc_b2;
    for (; i + L::kCount <= e; i += L::kCount) {
      acc_a += fa(VectorAt<T>{i});
      acc_b += fb(VectorAt<T>{i});
    }
    T ta = 0, tb = 0;
    for (; i < e; ++i) {
      ta += fa(ElementAt<T>{i});
      tb += fb(ElementAt<T>{i});
    }
    sa += static_cast<double>(ta + L::total(acc_a));
    sb += static_cast<double>(tb + L::total(acc_b));
  }
}

// Mean and sum of squared deviations of x[0, n), two-pass (exact for data far from zero).
template <typename T>
void row_moments(const T* x, int64_t n, double& mean, double& sq_dev) {
  mean = n > 0 ? row_sum<T>(n, [x](auto at) { return at(x); }) / static_cast<double>(n) : 0.0;
  const T m = static_cast<T>(mean);
  sq_dev = row_sum<T>(n, [x, m](auto at) {
    const auto d = at(x) - m;
    return d * d;
  });
}

// X read as N x C x S: dim 0, dim 1, everything after. A 1-D input of size N has C = 1 (ONNX
// BatchNormalization allows it).
struct ChannelLayout {
  int64_t n = 1, c = 1, s = 1;
  int64_t per_channel() const { return n * s; }
};

inline ChannelLayout channel_layout(const TensorShape& x) {
  ChannelLayout l;
  if (x.rank() == 0) return l;
  l.n = x[0];
  if (x.rank() >= 2) {
    l.c = x[1];
    l.s = x.size_between(2, x.rank());
  }
  return l;
}

// Per-channel mean and biased variance of X read as N x C x S, accumulated in double. Channels
// are independent, so the split over threads does not change the result.
template <typename S>
void channel_moments(ThreadPool& pool, const S* x, const ChannelLayout& l, double* mean, double* var) {
  using T = ComputeType<S>;
  const int64_t count = l.per_channel();
  const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  if (l.s == 1) {
    // N x C: sum down the columns, vectorized across channels.
    pool.parallel_for(l.c, std::max<int64_t>(16, kParallelGrain / std::max<int64_t>(l.n, 1)), [&](int64_t c0, int64_t c1) {
      const int64_t w = c1 - c0;
      double* m = mean + c0;
      double* v = var + c0;
      for (int64_t j = 0; j < w; ++j) m[j] = v[j] = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const S* row = x + n * l.c + c0;
        for (int64_t j = 0; j < w; ++j) m[j] += static_cast<double>(widened_from(row[j]));
      }
      for (int64_t j = 0; j < w; ++j) m[j] *= inv_count;
      for (int64_t n = 0; n < l.n; ++n) {
        const S* row = x + n * l.c + c0;
        for (int64_t j = 0; j < w; ++j) {
          const double d = static_cast<double>(widened_from(row[j])) - m[j];
          v[j] += d * d;
        }
      }
      for (int64_t j = 0; j < w; ++j) v[j] *= inv_count;
    });
    return;
  }
  pool.parallel_for(l.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(count, 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const S* row = x + (n * l.c + c) * l.s;
        sum += row_sum<T>(l.s, [row](auto at) { return at(row); });
      }
      mean[c] = sum * inv_count;
      const T m = static_cast<T>(mean[c]);
      double sq = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const S* row = x + (n * l.c + c) * l.s;
        sq += row_sum<T>(l.s, [row, m](auto at) {
          const auto d = at(row) - m;
          return d * d;
        });
      }
      var[c] = sq * inv_count;
    }
  });
}

// Per-channel sum(dy) and sum(dy * (x - mean[c])): what every normalization gradient needs.
template <typename S>
void channel_grad_sums(ThreadPool& pool, const S* dy, const S* x, const ChannelLayout& l, const double* mean,
                       double* sum_dy, double* sum_dy_xm) {
  using T = ComputeType<S>;
  const int64_t count = l.per_channel();
  if (l.s == 1) {
    pool.parallel_for(l.c, std::max<int64_t>(16, kParallelGrain / std::max<int64_t>(l.n, 1)), [&](int64_t c0, int64_t c1) {
      const int64_t w = c1 - c0;
      double* a = sum_dy + c0;
      double* b = sum_dy_xm + c0;
      const double* m = mean + c0;
      for (int64_t j = 0; j < w; ++j) a[j] = b[j] = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const S* g = dy + n * l.c + c0;
        const S* xr = x + n * l.c + c0;
        for (int64_t j = 0; j < w; ++j) {
          const double gd = static_cast<double>(widened_from(g[j]));
          a[j] += gd;
          b[j] += gd * (static_cast<double>(widened_from(xr[j])) - m[j]);
        }
      }
    });
    return;
  }
  pool.parallel_for(l.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(count, 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T m = static_cast<T>(mean[c]);
      double a = 0, b = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const int64_t base = (n * l.c + c) * l.s;
        const S* g = dy + base;
        const S* xr = x + base;
        double ra, rb;
        row_sum2<T>(l.s, [g](auto at) { return at(g); }, [g, xr, m](auto at) { return at(g) * (at(xr) - m); }, ra, rb);
        a += ra;
        b += rb;
      }
      sum_dy[c] = a;
      sum_dy_xm[c] = b;
    }
  });
}

// out = a[c] * u + b[c] * (v - shift[c]) + d[c] elementwise, c the channel; v == nullptr drops the
// middle term. Subtracting the shift before scaling keeps precision when |mean| >> std. u, v and
// out are stored as S, the coefficients are S's compute type T.
template <typename S>
void channel_affine(ThreadPool& pool, const ChannelLayout& l, const S* u, const S* v, const ComputeType<S>* shift,
                    const ComputeType<S>* a, const ComputeType<S>* b, const ComputeType<S>* d, S* out) {
  using T = ComputeType<S>;
  if (l.s == 1) {
    pool.parallel_for(l.n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.c, 1)), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const int64_t base = n * l.c;
        const S* ur = u + base;
        S* o = out + base;
        if (v) {
          const S* vr = v + base;
          for (int64_t c = 0; c < l.c; ++c) o[c] = rounded_to<S>(a[c] * widened_from(ur[c]) + b[c] * (widened_from(vr[c]) - shift[c]) + d[c]);
        } else {
          for (int64_t c = 0; c < l.c; ++c) o[c] = rounded_to<S>(a[c] * widened_from(ur[c]) + d[c]);
        }
      }
    });
    return;
  }
  pool.parallel_for(l.n * l.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.s, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % l.c, base = r * l.s;
      const T ac = a[c], dc = d[c];
      const S* ur = u + base;
      S* o = out + base;
      if (v) {
        const T bc = b[c], sc = shift[c];
        const S* vr = v + base;
        for (int64_t i = 0; i < l.s; ++i) o[i] = rounded_to<S>(ac * widened_from(ur[i]) + bc * (widened_from(vr[i]) - sc) + dc);
      } else {
        for (int64_t i = 0; i < l.s; ++i) o[i] = rounded_to<S>(ac * widened_from(ur[i]) + dc);
      }
    }
  });
}

// Reads a per-channel parameter as double, checking that it has C elements of X's type.
template <typename T>
void read_channel_param(const Tensor& t, int64_t c, const char* name, double* out) {
  OT_CHECK(t.numel() == c, name, " must have one value per channel (", c, "), got ", t.str());
  OT_CHECK(t.dtype() == DTypeOf<T>::value, name, " has element type ", dtype_name(t.dtype()), ", X has ",
           dtype_name(DTypeOf<T>::value), "; mixed element types are not supported");
  const T* p = t.data<T>();
  for (int64_t i = 0; i < c; ++i) out[i] = static_cast<double>(p[i]);
}

// Reads a per-channel parameter as double: of X's type, or float32 beside 16-bit X (autocast keeps
// a normalization's parameters and statistics in float32 while its data is bfloat16 or float16).
inline void read_channel_param_for(const Tensor& t, DType x_type, int64_t c, const char* name, double* out) {
  const bool allowed = t.dtype() == x_type || (is_16bit_float(x_type) && t.dtype() == DType::Float32);
  OT_CHECK(allowed, name, " has element type ", dtype_name(t.dtype()), ", X has ", dtype_name(x_type),
           is_16bit_float(x_type) ? "; a 16-bit X takes parameters of its own type or float32"
                                  : "; mixed element types are not supported");
  OT_CHECK(t.numel() == c, name, " must have one value per channel (", c, "), got ", t.str());
  switch (t.dtype()) {
    case DType::Float64: read_channel_param<double>(t, c, name, out); break;
    case DType::Float32: read_channel_param<float>(t, c, name, out); break;
    case DType::Float16: for (int64_t i = 0; i < c; ++i) out[i] = half_to_double(t.data<Half>()[i]); break;
    default: for (int64_t i = 0; i < c; ++i) out[i] = bfloat16_to_double(t.data<BHalf>()[i]); break;
  }
}

// Writes value_of(i), a double, into out's C elements, rounded once to out's element type.
template <typename F>
void write_channel_values(Tensor& out, int64_t c, F value_of) {
  switch (out.dtype()) {
    case DType::Float64: for (int64_t i = 0; i < c; ++i) out.data<double>()[i] = value_of(i); break;
    case DType::Float32: for (int64_t i = 0; i < c; ++i) out.data<float>()[i] = static_cast<float>(value_of(i)); break;
    case DType::Float16: for (int64_t i = 0; i < c; ++i) out.data<Half>()[i] = double_to_half(value_of(i)); break;
    case DType::BFloat16: for (int64_t i = 0; i < c; ++i) out.data<BHalf>()[i] = double_to_bfloat16(value_of(i)); break;
    default: OT_THROW("internal: a per-channel output of type ", dtype_name(out.dtype()));
  }
}

// X's element type as the storage tag fn is called with: float, double, Half or BHalf.
template <typename Fn>
decltype(auto) dispatch_storage(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Float16: return fn(TypeTag<Half>{});
    case DType::BFloat16: return fn(TypeTag<BHalf>{});
    default: return dispatch_float(t, what, std::forward<Fn>(fn));
  }
}

// Carves 64-byte aligned pieces out of one scratch block (a kernel gets one per call).
class ScratchCarver {
 public:
  ScratchCarver(void* base, size_t total) : base_(static_cast<uint8_t*>(base)), total_(total) {}
  template <typename T>
  static size_t bytes_for(int64_t count) {
    return (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
  }
  template <typename T>
  T* take(int64_t count) {
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += bytes_for<T>(count);
    OT_CHECK(used_ <= total_, "internal: scratch overrun");
    return p;
  }
  // N arrays of `count` Ts, one after the other.
  template <typename T, size_t N>
  std::array<T*, N> take_each(int64_t count) {
    std::array<T*, N> arrays;
    for (T*& p : arrays) p = take<T>(count);
    return arrays;
  }

 private:
  uint8_t* base_;
  size_t total_, used_ = 0;
};

// The per-channel scratch of the batch norm kernels: D arrays of C doubles (statistics and
// parameters, kept in double) and K arrays of C values of the compute type T.
template <typename T, size_t D, size_t K>
struct ChannelScratch {
  std::array<double*, D> doubles;
  std::array<T*, K> values;
};
template <typename T, size_t D, size_t K>
ChannelScratch<T, D, K> channel_scratch(KernelContext& ctx, int64_t C) {
  const size_t bytes = D * ScratchCarver::bytes_for<double>(C) + K * ScratchCarver::bytes_for<T>(C);
  ScratchCarver sc(ctx.scratch(bytes), bytes);
  return {sc.take_each<double, D>(C), sc.take_each<T, K>(C)};
}

}  // namespace onnxtrain::norm
