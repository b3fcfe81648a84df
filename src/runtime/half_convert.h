#pragma once
// Conversions between the 16-bit float types and float32 for kernels that compute in float32 on
// 16-bit values: widening is exact, narrowing rounds to nearest even, once.
#include "core/half.h"
#include "core/tensor.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

inline constexpr int64_t kHalfConvertGrain = 1 << 16;

// A float32 copy of a float16 or bfloat16 tensor.
inline Tensor widened_to_float32(ThreadPool& pool, const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  float* o = out.data<float>();
  if (t.dtype() == DType::Float16) {
    const Half* in = t.data<Half>();
    pool.parallel_for(t.numel(), kHalfConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = half_to_float(in[i]);
    });
  } else {
    OT_CHECK(t.dtype() == DType::BFloat16, "widening ", t.str(), ": not a 16-bit float type");
    const BHalf* in = t.data<BHalf>();
    pool.parallel_for(t.numel(), kHalfConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = bfloat16_to_float(in[i]);
    });
  }
  return out;
}

// Rounds out.numel() float32 values into `out`, a float16 or bfloat16 tensor.
inline void round_into(ThreadPool& pool, const float* values, Tensor& out) {
  if (out.dtype() == DType::Float16) {
    Half* o = out.data<Half>();
    pool.parallel_for(out.numel(), kHalfConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = float_to_half(values[i]);
    });
  } else {
    OT_CHECK(out.dtype() == DType::BFloat16, "rounding into ", out.str(), ": not a 16-bit float type");
    BHalf* o = out.data<BHalf>();
    pool.parallel_for(out.numel(), kHalfConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = float_to_bfloat16(values[i]);
    });
  }
}

}  // namespace onnxtrain
