// Ops that build a tensor from a few numbers rather than moving data: Range, EyeLike, OneHot.
// None has a gradient (their outputs are constants of their inputs' shapes and values).
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

void range(KernelContext& ctx) {
  const Tensor& start = ctx.input(0);
  const Tensor& limit = ctx.input(1);
  const Tensor& delta = ctx.input(2);
  for (const Tensor* t : {&start, &limit, &delta})
    OT_CHECK(t->numel() == 1 && t->dtype() == start.dtype(), "start, limit and delta must be scalars of one type, got ",
             start.str(), ", ", limit.str(), ", ", delta.str());
  dispatch_numeric(start.dtype(), "Range", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = *start.data<T>(), l = *limit.data<T>(), d = *delta.data<T>();
    OT_CHECK(d != T(0), "delta must not be 0");
    int64_t n;
    if constexpr (std::is_floating_point_v<T>) {
      const double count = std::max(std::ceil((static_cast<double>(l) - s) / d), 0.0);
      // NaN bounds or a count past int64 (a tiny delta): no cast to int64 can be trusted.
      OT_CHECK(count < 9.2e18, "Range(", s, ", ", l, ", ", d, ") has no countable number of elements");
      n = static_cast<int64_t>(count);
    } else {
      // Exact ceil((l - s) / d) in integers, on int64 so that the difference cannot overflow T.
      const int64_t diff = checked_sub(static_cast<int64_t>(l), static_cast<int64_t>(s), "Range"),
                    step = static_cast<int64_t>(d);
      if (step > 0) n = diff > 0 ? (diff - 1) / step + 1 : 0;
      else n = diff < 0 ? checked_add((diff + 1) / step, 1, "Range") : 0;
    }
    Tensor& out = ctx.allocate_output(0, start.dtype(), {n});
    T* o = out.data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(s + static_cast<T>(i) * d);
  });
}

// The value 1 of an element type, as raw bits of its size.
Tensor one_of(DType dtype) {
  if (dtype == DType::Float16) return Tensor::scalar<uint16_t>(0x3C00).view({});
  if (dtype == DType::BFloat16) return Tensor::scalar<uint16_t>(0x3F80).view({});
  return dispatch_all(dtype, "EyeLike", [](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor::scalar<T>(static_cast<T>(1));
  });
}

class EyeLikeKernel final : public Kernel {
 public:
  explicit EyeLikeKernel(const KernelInfo& info)
      : dtype_(info.node.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(info.node.attr_int("dtype", 1)))
                                           : DType::Undefined),
        k_(info.node.attr_int("k", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() == 2, "input must be 2-D, got ", x.str());
    const DType dtype = dtype_ == DType::Undefined ? x.dtype() : dtype_;
    Tensor& y = ctx.allocate_output(0, dtype, x.shape());
    std::memset(y.raw_data(), 0, y.nbytes());
    const Tensor one = one_of(dtype);
    const size_t es = dtype_size(dtype);
    const int64_t rows = x.dim(0), cols = x.dim(1);
    auto* dst = static_cast<uint8_t*>(y.raw_data());
    for (int64_t i = std::max<int64_t>(0, -k_); i < rows && i + k_ < cols; ++i)
      std::memcpy(dst + (i * cols + i + k_) * static_cast<int64_t>(es), one.raw_data(), es);
  }

 private:
  DType dtype_;
  int64_t k_;
};

// Numbers of any numeric type read as int64, floats truncated as a cast does (ONNX allows float
// indices and depth).
void as_int64(const Tensor& t, int64_t* out) {
  if (is_16bit_float(t.dtype())) {
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int64_t>(t.item_as_double(i));
    return;
  }
  dispatch_numeric(t.dtype(), "OneHot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        OT_CHECK(std::isfinite(p[i]), "OneHot: non-finite value ", p[i], " where an index or depth is expected");
        // Beyond int64 a cast is undefined; such values are out of range for any depth anyway.
        if (std::abs(static_cast<double>(p[i])) >= 9.2e18) {
          out[i] = p[i] > 0 ? INT64_MAX : INT64_MIN;
          continue;
        }
      }
      out[i] = static_cast<int64_t>(p[i]);
    }
  });
}

class OneHotKernel final : public Kernel {
 public:
  explicit OneHotKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", -1)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& indices = ctx.input(0);
    const Tensor& depth_t = ctx.input(1);
    const Tensor& values = ctx.input(2);
    OT_CHECK(depth_t.numel() == 1, "depth must hold one value, got ", depth_t.str());
    OT_CHECK(values.numel() == 2, "values must hold [off_value, on_value], got ", values.str());
    int64_t depth = 0;
    as_int64(depth_t, &depth);
    OT_CHECK(depth >= 1, "depth must be positive, got ", depth);
    const int rank = indices.rank() + 1;
    const int axis = normalize_axis(axis_, rank, "OneHot");
    TensorShape shape = indices.shape();
    shape.insert(axis, depth);
    Tensor& y = ctx.allocate_output(0, values.dtype(), shape);
    const int64_t outer = indices.shape().size_between(0, axis);
    const int64_t inner = indices.shape().size_between(axis, indices.rank());
    auto* idx = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(indices.numel()) * sizeof(int64_t)));
    as_int64(indices, idx);
    // Indices outside [-depth, depth) select nothing: their row stays all off_value (ONNX spec).
    dispatch_bytes(values.dtype(), "OneHot", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T off = static_cast<const T*>(values.raw_data())[0], on = static_cast<const T*>(values.raw_data())[1];
      T* o = static_cast<T*>(y.raw_data());
      std::fill(o, o + y.numel(), off);
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t b = 0; b < inner; ++b) {
          int64_t v = idx[a * inner + b];
          if (v < -depth || v >= depth) continue;
          if (v < 0) v += depth;
          o[(a * depth + v) * inner + b] = on;
        }
    });
  }

 private:
  int64_t axis_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Range", kernel_factory(&range), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "EyeLike", kernel_factory<EyeLikeKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "OneHot", kernel_factory<OneHotKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
