#pragma once
// Loops for elementwise kernels: unary maps and broadcasting binary ops, split across the pool
// and written so that the compiler vectorizes the common stride patterns.
#include "opdef/kernel.h"
#include "ops/common/broadcast.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

// Below this many elements a parallel split costs more than it saves.
inline constexpr int64_t kParallelGrain = 1 << 15;

template <typename TIn, typename TOut, typename Op>
void unary_map(ThreadPool& pool, const TIn* in, TOut* out, int64_t n, Op op) {
  pool.parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = op(in[i]);
  });
}

// out = op(a, b) with broadcasting; out must already have the broadcast shape.
template <typename TA, typename TB, typename TOut, typename Op>
void binary_broadcast(ThreadPool& pool, const TA* a, const TensorShape& a_shape, const TB* b,
                      const TensorShape& b_shape, TOut* out, const TensorShape& out_shape, Op op) {
  const int64_t n = out_shape.numel();
  if (a_shape == out_shape && b_shape == out_shape) {
    pool.parallel_for(n, kParallelGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) out[i] = op(a[i], b[i]);
    });
    return;
  }
  if (b_shape.numel() == 1 && a_shape == out_shape) {
    const TB bv = b[0];
    pool.parallel_for(n, kParallelGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) out[i] = op(a[i], bv);
    });
    return;
  }
  if (a_shape.numel() == 1 && b_shape == out_shape) {
    const TA av = a[0];
    pool.parallel_for(n, kParallelGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) out[i] = op(av, b[i]);
    });
    return;
  }
  BroadcastLoop<3> loop(out_shape, {out_shape, a_shape, b_shape});
  const int64_t inner = loop.inner();
  const int64_t sa = loop.inner_stride(1), sb = loop.inner_stride(2);
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1));
  pool.parallel_for(loop.rows(), grain, [&](int64_t r0, int64_t r1) {
    loop.for_rows(r0, r1, [&](const std::array<int64_t, 3>& off) {
      TOut* o = out + off[0];
      const TA* pa = a + off[1];
      const TB* pb = b + off[2];
      if (sa == 1 && sb == 1) {
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i], pb[i]);
      } else if (sa == 1 && sb == 0) {
        const TB bv = *pb;
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i], bv);
      } else if (sa == 0 && sb == 1) {
        const TA av = *pa;
        for (int64_t i = 0; i < inner; ++i) o[i] = op(av, pb[i]);
      } else {
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i * sa], pb[i * sb]);
      }
    });
  });
}

// Kernel body for a same-type binary op: broadcasts, allocates output 0 and applies op.
template <typename T, typename Op>
void binary_kernel(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OT_CHECK(a.dtype() == b.dtype(), "inputs have different element types: ", a.str(), " and ", b.str());
  TensorShape shape = broadcast_shapes({a.shape(), b.shape()}, "broadcast");
  Tensor& out = ctx.allocate_output(0, a.dtype(), shape);
  binary_broadcast(ctx.threads(), a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<T>(), shape, op);
}

// Kernel body for a same-type unary op.
template <typename T, typename Op>
void unary_kernel(KernelContext& ctx, Op op) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  unary_map(ctx.threads(), x.data<T>(), y.data<T>(), x.numel(), op);
}

}  // namespace onnxtrain
