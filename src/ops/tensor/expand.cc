// Expand (numpy broadcast to a shape) and its gradient: the sum back to the input's shape.
#include <cstring>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/broadcast.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

// Copies `in` broadcast to `out_shape` into `out`; any element type.
void broadcast_copy(ThreadPool& pool, const Tensor& in, Tensor& out) {
  const size_t es = dtype_size(in.dtype());
  const auto* src = static_cast<const uint8_t*>(in.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  BroadcastLoop<2> loop(out.shape(), {out.shape(), in.shape()});
  const int64_t inner = loop.inner(), stride = loop.inner_stride(1);
  pool.parallel_for(loop.rows(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                    [&](int64_t r0, int64_t r1) {
                      loop.for_rows(r0, r1, [&](const std::array<int64_t, 2>& off) {
                        uint8_t* o = dst + off[0] * es;
                        const uint8_t* p = src + off[1] * es;
                        if (stride == 1) {
                          std::memcpy(o, p, static_cast<size_t>(inner) * es);
                        } else {
                          for (int64_t i = 0; i < inner; ++i) std::memcpy(o + i * es, p, es);
                        }
                      });
                    });
}

void expand(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  TensorShape target(ctx.input(1).to_int64_vector());
  TensorShape shape = broadcast_shapes({x.shape(), target}, "Expand");
  if (shape == x.shape()) {
    ctx.alias_input(0, 0, shape);
    return;
  }
  Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
  broadcast_copy(ctx.threads(), x, y);
}

void expand_gradient(GradBuilder& g) { g.set_input_grad(0, g.reduce_to_input_shape(g.output_grad(0), 0)); }

}  // namespace

ONNXTRAIN_KERNEL("", "Expand", kernel_factory(&expand), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Expand", kBothHalfFloats);
ONNXTRAIN_GRADIENT("", "Expand", expand_gradient);

}  // namespace onnxtrain
