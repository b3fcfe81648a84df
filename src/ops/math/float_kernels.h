#pragma once
// Kernel bodies shared by the elementwise math and activation ops: float-only unary maps,
// binary backward kernels, and a three-operand broadcasting loop for gradients that read the
// output gradient together with two (possibly broadcast) forward inputs.
#include <cmath>

#include "ops/common/elementwise.h"
#include "ops/math/fast_math.h"

namespace onnxtrain {

// y = f(x) for float32/float64; f is generic over the element type.
template <typename F>
void float_unary(KernelContext& ctx, const char* what, F f) {
  dispatch_float(ctx.input(0).dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T>(ctx, [f](T x) { return static_cast<T>(f(x)); });
  });
}

// out = f(input0, input1), same float type, broadcasting: the shape of most backward kernels
// (dX = f(dY, X or Y)).
template <typename F>
void float_binary(KernelContext& ctx, const char* what, F f) {
  dispatch_float(ctx.input(0).dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [f](T a, T b) { return static_cast<T>(f(a, b)); });
  });
}

// float_unary for a lambda written once over its argument's type (fast_math.h's lane_t and
// broadcast, and `using std::f; using fast::f;` for its functions): float32 calls it on 8-lane
// fast::VF vectors, float64 on scalars. GCC leaves many select-and-scale loops scalar ("no vectype
// for stmt"), at a twentieth of a copy's speed, so the vector calls are spelled out here.
template <typename F>
void float_unary_vectorized(KernelContext& ctx, const char* what, F f) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Float32) return float_unary(ctx, what, f);
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  fast::map(ctx.threads(), x.data<float>(), y.data<float>(), x.numel(), f);
}

// The same for float_binary, on vectors where the operands are two same-shaped float32 tensors (a
// backward kernel's dY and its saved value); broadcasting and float64 call f on scalars.
template <typename F>
void float_binary_vectorized(KernelContext& ctx, const char* what, F f) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::Float32 || b.dtype() != DType::Float32 || a.shape() != b.shape())
    return float_binary(ctx, what, f);
  Tensor& out = ctx.allocate_output(0, a.dtype(), a.shape());
  fast::zip(ctx.threads(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel(), f);
}

// out[i] = op(a[i], b[i], c[i]) over out_shape, each operand broadcast to it.
template <typename TA, typename TB, typename TC, typename TOut, typename Op>
void ternary_broadcast(ThreadPool& pool, const TA* a, const TensorShape& a_shape, const TB* b,
                       const TensorShape& b_shape, const TC* c, const TensorShape& c_shape, TOut* out,
                       const TensorShape& out_shape, Op op) {
  const int64_t n = out_shape.numel();
  if (a_shape == out_shape && b_shape == out_shape && c_shape == out_shape) {
    pool.parallel_for(n, kParallelGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) out[i] = op(a[i], b[i], c[i]);
    });
    return;
  }
  BroadcastLoop<4> loop(out_shape, {out_shape, a_shape, b_shape, c_shape});
  const int64_t inner = loop.inner();
  const int64_t sa = loop.inner_stride(1), sb = loop.inner_stride(2), sc = loop.inner_stride(3);
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1));
  pool.parallel_for(loop.rows(), grain, [&](int64_t r0, int64_t r1) {
    loop.for_rows(r0, r1, [&](const std::array<int64_t, 4>& off) {
      TOut* o = out + off[0];
      const TA* pa = a + off[1];
      const TB* pb = b + off[2];
      const TC* pc = c + off[3];
      if (sa == 1 && sb == 1 && sc == 1) {
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i], pb[i], pc[i]);
      } else if (sa == 1 && sb == 1 && sc == 0) {
        const TC cv = *pc;
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i], pb[i], cv);
      } else if (sa == 1 && sb == 0 && sc == 1) {
        const TB bv = *pb;
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i], bv, pc[i]);
      } else {
        for (int64_t i = 0; i < inner; ++i) o[i] = op(pa[i * sa], pb[i * sb], pc[i * sc]);
      }
    });
  });
}

// Which input a split backward kernel differentiates: backward kernels with several possible
// results take an `input` attribute and produce one, so no pass is spent on an unused gradient.
inline int grad_input_attr(const KernelInfo& info, int num_inputs, const char* what) {
  int64_t i = info.node.attr_int("input", 0);
  OT_CHECK(i >= 0 && i < num_inputs, what, ": attribute 'input' is ", i, ", must be in [0, ", num_inputs, ")");
  return static_cast<int>(i);
}

}  // namespace onnxtrain
