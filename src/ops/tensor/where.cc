// Where(condition, X, Y) with broadcasting, and its gradient: dY routed to X where the condition
// holds and to Y elsewhere, each summed back to its input's shape.
#include <algorithm>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/broadcast.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

// One row of out = c ? x : y. The general loop's strides keep GCC from vectorizing it (a fifth
// of a copy's speed), so the layouts models use get loops of their own: all three contiguous,
// and one operand a broadcast scalar (an attention mask's fill value, or a mask per row).
template <typename T>
void select_row(const bool* c, int64_t sc, const T* x, int64_t sx, const T* y, int64_t sy, T* out, int64_t n) {
  // Bytes of a bool are 0 or 1; read as integers, the select becomes a vector blend.
  const uint8_t* cond = reinterpret_cast<const uint8_t*>(c);
  if (sc == 1 && sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = cond[i] ? x[i] : y[i];
  } else if (sc == 1 && sx == 1 && sy == 0) {
    const T fill = *y;
    for (int64_t i = 0; i < n; ++i) out[i] = cond[i] ? x[i] : fill;
  } else if (sc == 1 && sx == 0 && sy == 1) {
    const T fill = *x;
    for (int64_t i = 0; i < n; ++i) out[i] = cond[i] ? fill : y[i];
  } else if (sc == 0) {
    // One condition for the row (a mask per attention row): a copy or a fill, which the strided
    // loop below would do element by element.
    const T* from = *cond ? x : y;
    const int64_t stride = *cond ? sx : sy;
    if (stride == 1) {
      std::copy(from, from + n, out);
    } else if (stride == 0) {
      std::fill(out, out + n, *from);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = from[i * stride];
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = cond[i * sc] ? x[i * sx] : y[i * sy];
  }
}

void where(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  OT_CHECK(c.dtype() == DType::Bool, "condition must be bool, got ", c.str());
  OT_CHECK(x.dtype() == y.dtype(), "X and Y have different element types: ", x.str(), " and ", y.str());
  TensorShape shape = broadcast_shapes({c.shape(), x.shape(), y.shape()}, "Where");
  Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
  // A select moves values unchanged: by width, so float16 and bfloat16 move as bits.
  dispatch_by_width(x.dtype(), "Where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = c.data<bool>();
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    BroadcastLoop<4> loop(shape, {shape, c.shape(), x.shape(), y.shape()});
    const int64_t inner = loop.inner();
    const int64_t sc = loop.inner_stride(1), sx = loop.inner_stride(2), sy = loop.inner_stride(3);
    ctx.threads().parallel_for(loop.rows(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                               [&](int64_t r0, int64_t r1) {
                                 loop.for_rows(r0, r1, [&](const std::array<int64_t, 4>& off) {
                                   select_row(pc + off[1], sc, px + off[2], sx, py + off[3], sy, po + off[0], inner);
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

ONNXTRAIN_KERNEL("", "Where", kernel_factory(&where), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Where", where_gradient);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Where", kBothHalfFloats);

}  // namespace onnxtrain
