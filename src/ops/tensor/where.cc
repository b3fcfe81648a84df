// Where(condition, X, Y) with broadcasting, and its gradient: dY routed to X where the condition
// holds and to Y elsewhere, each summed back to its input's shape.
#include "autodiff/grad_builder.h"
#include "ops/common/broadcast.h"
#include "ops/common/elementwise.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

void where(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  OT_CHECK(c.dtype() == DType::Bool, "condition must be bool, got ", c.str());
  OT_CHECK(x.dtype() == y.dtype(), "X and Y have different element types: ", x.str(), " and ", y.str());
  TensorShape shape = broadcast_shapes({c.shape(), x.shape(), y.shape()}, "Where");
  Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
  dispatch_all(x.dtype(), "Where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = c.data<bool>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    BroadcastLoop<4> loop(shape, {shape, c.shape(), x.shape(), y.shape()});
    const int64_t inner = loop.inner();
    const int64_t sc = loop.inner_stride(1), sx = loop.inner_stride(2), sy = loop.inner_stride(3);
    ctx.threads().parallel_for(loop.rows(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 loop.for_rows(r0, r1, [&](const std::array<int64_t, 4>& off) {
                                   for (int64_t i = 0; i < inner; ++i)
                                     po[off[0] + i] = pc[off[1] + i * sc] ? px[off[2] + i * sx] : py[off[3] + i * sy];
                                 });
                               });
  });
}

void where_gradient(GradBuilder& g) {
  const std::string& dy = g.output_grad(0);
  std::string zero = g.scalar_like(0.0, dy);
  if (g.needs_input_grad(1))
    g.set_input_grad(1, g.reduce_to_input_shape(g.op("Where", {g.input(0), dy, zero}), 1));
  if (g.needs_input_grad(2))
    g.set_input_grad(2, g.reduce_to_input_shape(g.op("Where", {g.input(0), zero, dy}), 2));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Where", kernel_factory(&where));
ONNXTRAIN_GRADIENT("", "Where", where_gradient);

}  // namespace onnxtrain
