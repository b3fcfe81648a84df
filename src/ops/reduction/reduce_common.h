#pragma once
// What the Reduce* ops share. Forward: reading the axes (an attribute, or input 1 from some opset
// on), keepdims and noop_with_empty_axes, and running a reduction end to end. Backward: bringing
// a value shaped like the output back to the input's rank, and elementwise maps over the input
// with output-shaped operands broadcast against it.
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "opdef/kernel.h"
#include "ops/common/broadcast.h"
#include "ops/common/reduce.h"
#include "runtime/half_convert.h"

namespace onnxtrain {

class GradBuilder;

// ReduceSum reads its axes from input 1 since opset 13; the other Reduce* ops only from opset 18.
inline constexpr int kReduceSumAxesInputSince = 13;
inline constexpr int kReduceAxesInputSince = 18;

class ReduceAxes {
 public:
  ReduceAxes(const KernelInfo& info, int axes_input_since, const char* op);

  // One flag per dim of `in`. Returns false when the op is the identity (empty axes with
  // noop_with_empty_axes set); empty axes otherwise mean every axis.
  bool resolve(const KernelContext& ctx, const TensorShape& in, std::vector<bool>& reduce) const;
  bool keepdims() const { return keepdims_; }
  const char* op() const { return op_; }

 private:
  const char* op_;
  std::vector<int64_t> axes_;
  bool from_input_;
  bool keepdims_;
  bool noop_;
};

// A Reduce* kernel: Impl names the op (kName), says since which opset axes are an input
// (kAxesInputSince) and runs it (static void run(KernelContext&, const ReduceAxes&)).
template <typename Impl>
class ReduceKernel final : public Kernel {
 public:
  explicit ReduceKernel(const KernelInfo& info) : axes_(info, Impl::kAxesInputSince, Impl::kName) {}
  void compute(KernelContext& ctx) const override { Impl::run(ctx, axes_); }

 private:
  ReduceAxes axes_;
};

struct NoPost {};

// Runs a reduction op: resolves axes, allocates output 0 and folds input 0 with `op`; then each
// output value v becomes post(v, n), n = number of elements folded into it. S is the stored
// element type; `op` and `post` work in ComputeType<S>: a 16-bit input is widened as it is read,
// and the float32 results are rounded once into the output.
template <typename S, typename Op, typename Post = NoPost>
void run_reduce(KernelContext& ctx, const ReduceAxes& axes, const Op& op, Post post = {}) {
  using T = ComputeType<S>;
  const Tensor& x = ctx.input(0);
  std::vector<bool> reduce;
  if (!axes.resolve(ctx, x.shape(), reduce)) {
    ctx.alias_input(0, 0, x.shape());
    return;
  }
  ReduceGroups groups = reduce_groups(x.shape(), reduce);
  Tensor& y = ctx.allocate_output(0, x.dtype(), reduced_shape(x.shape(), reduce, axes.keepdims()));
  const int64_t scratch_elems = reduce_scratch_elems(groups);
  const int64_t staged = kIs16BitFloat<S> ? groups.out_numel : 0;  // float32 results before rounding
  T* memory = scratch_elems + staged
                  ? static_cast<T*>(ctx.scratch(static_cast<size_t>(scratch_elems + staged) * sizeof(T)))
                  : nullptr;
  T* scratch = scratch_elems ? memory + staged : nullptr;
  T* out = nullptr;
  if constexpr (kIs16BitFloat<S>) out = memory;
  else out = y.data<S>();
  reduce_axes(ctx.threads(), x.data<S>(), groups, out, scratch, op);
  if constexpr (!std::is_same_v<Post, NoPost>) {
    const int64_t n = groups.out_numel ? groups.in_numel / groups.out_numel : 0;
    ctx.threads().parallel_for(groups.out_numel, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = post(out[i], n);
    });
  }
  if constexpr (kIs16BitFloat<S>) round_into(ctx.threads(), out, y);
}

// The element types the Reduce* kernels accept: float32, float64, int32, int64.
template <typename Fn>
decltype(auto) dispatch_reduce(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int64: return fn(TypeTag<int64_t>{});
    default:
      OT_THROW(what, ": element type ", dtype_name(t), " is not supported (float32, float64, int32, int64)");
  }
}

// ---- gradient side ----

// `v`, shaped like output 0, reshaped to the input's rank with the reduced dims as 1 (a no-op
// when keepdims is set). axes_input_since as for ReduceAxes.
std::string reduced_keepdims(GradBuilder& g, const std::string& v, int axes_input_since);
// Expand(v, Shape(input 0)).
std::string expand_to_input(GradBuilder& g, const std::string& v);
// The forward node is the identity: noop_with_empty_axes and no axes at all.
bool reduce_is_identity(const GradBuilder& g, int axes_input_since);

// out = f(x, a, b) elementwise over x's shape, with a and b (keepdims-shaped) broadcast to it.
template <typename T, typename F>
void map_over_input(ThreadPool& pool, const Tensor& x, const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const TensorShape& shape = x.shape();
  OT_CHECK(broadcast_shapes({shape, a.shape(), b.shape()}, "reduction gradient") == shape, "the reduced operands ",
           a.str(), " and ", b.str(), " do not broadcast to the input ", x.str());
  const T* px = x.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  BroadcastLoop<4> loop(shape, {shape, shape, a.shape(), b.shape()});
  const int64_t inner = loop.inner(), sa = loop.inner_stride(2), sb = loop.inner_stride(3);
  pool.parallel_for(loop.rows(), std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(inner, 1)),
                    [&](int64_t r0, int64_t r1) {
                      loop.for_rows(r0, r1, [&](const std::array<int64_t, 4>& off) {
                        T* o = po + off[0];
                        const T* xr = px + off[1];
                        const T* ar = pa + off[2];
                        const T* br = pb + off[3];
                        if (sa == 0 && sb == 0) {  // reduced along the innermost run
                          const T av = *ar, bv = *br;
                          for (int64_t i = 0; i < inner; ++i) o[i] = f(xr[i], av, bv);
                        } else if (sa == 1 && sb == 1) {
                          for (int64_t i = 0; i < inner; ++i) o[i] = f(xr[i], ar[i], br[i]);
                        } else {
                          for (int64_t i = 0; i < inner; ++i) o[i] = f(xr[i], ar[i * sa], br[i * sb]);
                        }
                      });
                    });
}

}  // namespace onnxtrain
