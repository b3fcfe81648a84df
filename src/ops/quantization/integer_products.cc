// Integer matrix products and convolutions (opset 10) over 8-bit operands with zero points:
//   MatMulInteger, ConvInteger: the int32 sums of (a - a_zero_point) * (b - b_zero_point)
//   QLinearMatMul, QLinearConv: those sums (plus QLinearConv's int32 bias), requantized:
//     y = saturate(round(sum * a_scale * b_scale / y_scale) + y_zero_point)
// A's zero point and scale may be per row (MatMul) and W's per output channel (Conv); B's per
// column. Sums accumulate in int64 and wrap to int32 as the spec's int32 accumulator would.
#include "opdef/op_registry.h"
#include "ops/common/broadcast.h"
#include "ops/math/matmul.h"
#include "ops/nn/conv_common.h"
#include "ops/quantization/quantize_common.h"

namespace onnxtrain {
namespace {

bool is_8bit(DType t) { return t == DType::UInt8 || t == DType::Int8; }

// The operand's values minus their zero point, widened; zero_point_of(i) is the index into zp
// of element i.
template <typename Index>
std::vector<int32_t> centered(const Tensor& t, const std::vector<int32_t>& zp, Index zero_point_of, const char* op,
                              const char* what) {
  OT_CHECK(is_8bit(t.dtype()), op, ": ", what, " has element type ", dtype_name(t.dtype()), "; uint8 or int8 expected");
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  auto fill = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      out[static_cast<size_t>(i)] = static_cast<int32_t>(p[i]) - zp[static_cast<size_t>(zero_point_of(i))];
  };
  if (t.dtype() == DType::UInt8) fill(TypeTag<uint8_t>{});
  else fill(TypeTag<int8_t>{});
  return out;
}

const Tensor* optional_input(const KernelContext& ctx, int i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; }

// ---- matrix products ----

// numpy.matmul's dims: 1-D operands promoted ([K] -> [1, K] for A, [K, 1] for B), batch dims
// broadcast.
struct IntMatmulDims {
  int64_t m, k, n;
  TensorShape batch, a_batch, b_batch, out;
};

IntMatmulDims int_matmul_dims(const TensorShape& a, const TensorShape& b, const char* op) {
  IntMatmulDims d;
  d.out = matmul_shape(a, b, false, false, op);
  d.m = a.rank() == 1 ? 1 : a[a.rank() - 2];
  d.k = a.back();
  d.n = b.rank() == 1 ? 1 : b.back();
  d.a_batch = a.rank() <= 2 ? TensorShape{} : TensorShape(a.begin(), a.end() - 2);
  d.b_batch = b.rank() <= 2 ? TensorShape{} : TensorShape(b.begin(), b.end() - 2);
  d.batch = broadcast_shapes({d.a_batch, d.b_batch}, op);
  return d;
}

// sums[batch, m, n] for centered operands, as int64.
std::vector<int64_t> int_matmul(ThreadPool& pool, const IntMatmulDims& d, const std::vector<int32_t>& a,
                                const std::vector<int32_t>& b) {
  const int64_t batches = d.batch.numel();
  std::vector<int64_t> out(static_cast<size_t>(batches * d.m * d.n), 0);
  const auto a_strides = broadcast_strides(d.a_batch, d.batch);
  const auto b_strides = broadcast_strides(d.b_batch, d.batch);
  pool.parallel_for(batches * d.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, d.n * d.k)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / d.m, row = r % d.m;
      int64_t rem = bi, a_off = 0, b_off = 0;
      for (int dim = d.batch.rank() - 1; dim >= 0; --dim) {
        const int64_t idx = rem % d.batch[dim];
        rem /= d.batch[dim];
        a_off += idx * a_strides[static_cast<size_t>(dim)];
        b_off += idx * b_strides[static_cast<size_t>(dim)];
      }
      const int32_t* pa = a.data() + (a_off * d.m + row) * d.k;
      const int32_t* pb = b.data() + b_off * d.k * d.n;
      int64_t* po = out.data() + r * d.n;
      for (int64_t kk = 0; kk < d.k; ++kk) {
        const int64_t av = pa[kk];
        if (av == 0) continue;
        const int32_t* brow = pb + kk * d.n;
        for (int64_t j = 0; j < d.n; ++j) po[j] += av * brow[j];
      }
    }
  });
  return out;
}

// Per-row A and per-column B parameters: element i of A is in row (i / K) % M, of B in column i % N.
struct MatmulOperands {
  IntMatmulDims d;
  std::vector<int32_t> a, b;
};

MatmulOperands matmul_operands(const Tensor& a, const Tensor* a_zp, const Tensor& b, const Tensor* b_zp, const char* op) {
  MatmulOperands o;
  o.d = int_matmul_dims(a.shape(), b.shape(), op);
  const int64_t m = o.d.m, k = o.d.k, n = o.d.n;
  const std::vector<int32_t> azp = zero_points(a_zp, m, op, "a_zero_point");
  const std::vector<int32_t> bzp = zero_points(b_zp, n, op, "b_zero_point");
  if (a_zp) OT_CHECK(a_zp->dtype() == a.dtype(), op, ": a_zero_point's element type differs from A's");
  if (b_zp) OT_CHECK(b_zp->dtype() == b.dtype(), op, ": b_zero_point's element type differs from B's");
  o.a = centered(a, azp, [&](int64_t i) { return (i / k) % m; }, op, "A");
  o.b = centered(b, bzp, [&](int64_t i) { return i % n; }, op, "B");
  return o;
}

void matmul_integer(KernelContext& ctx) {
  const MatmulOperands o =
      matmul_operands(ctx.input(0), optional_input(ctx, 2), ctx.input(1), optional_input(ctx, 3), "MatMulInteger");
  const std::vector<int64_t> sums = int_matmul(ctx.threads(), o.d, o.a, o.b);
  int32_t* y = ctx.allocate_output(0, DType::Int32, o.d.out).data<int32_t>();
  for (size_t i = 0; i < sums.size(); ++i) y[i] = static_cast<int32_t>(sums[i]);
}

// Writes saturate(round(sum * multiplier(i)) + y_zero_point) into y (uint8 or int8).
template <typename Multiplier>
void requantize(const std::vector<int64_t>& sums, Multiplier multiplier, const Tensor* y_zp, Tensor& y, const char* op) {
  const int32_t zp = zero_points(y_zp, 1, op, "y_zero_point")[0];
  bool bad = false;
  auto run = [&](auto tag) {
    using Q = typename decltype(tag)::type;
    Q* py = y.data<Q>();
    for (size_t i = 0; i < sums.size(); ++i)
      py[i] = round_and_saturate<Q>(static_cast<double>(static_cast<int32_t>(sums[i])) * multiplier(static_cast<int64_t>(i)), zp, bad);
  };
  if (y.dtype() == DType::UInt8) run(TypeTag<uint8_t>{});
  else run(TypeTag<int8_t>{});
}

DType requantized_type(const Tensor* y_zp, const char* op) {
  const DType t = y_zp ? y_zp->dtype() : DType::UInt8;
  OT_CHECK(is_8bit(t), op, ": y_zero_point has element type ", dtype_name(t), "; uint8 or int8 expected");
  return t;
}

// The float32 product of the scales, as the reference computes it: (a * b) / y.
float multiplier_of(float a_scale, float b_scale, float y_scale) { return a_scale * b_scale / y_scale; }

void qlinear_matmul(KernelContext& ctx) {
  const char* op = "QLinearMatMul";
  const MatmulOperands o = matmul_operands(ctx.input(0), optional_input(ctx, 2), ctx.input(3), optional_input(ctx, 5), op);
  const std::vector<float> a_scale = scales(ctx.input(1), o.d.m, op, "a_scale");
  const std::vector<float> b_scale = scales(ctx.input(4), o.d.n, op, "b_scale");
  const float y_scale = scales(ctx.input(6), 1, op, "y_scale")[0];
  const Tensor* y_zp = optional_input(ctx, 7);
  const std::vector<int64_t> sums = int_matmul(ctx.threads(), o.d, o.a, o.b);
  Tensor& y = ctx.allocate_output(0, requantized_type(y_zp, op), o.d.out);
  const int64_t m = o.d.m, n = o.d.n;
  requantize(sums, [&](int64_t i) {
    return multiplier_of(a_scale[static_cast<size_t>((i / n) % m)], b_scale[static_cast<size_t>(i % n)], y_scale);
  }, y_zp, y, op);
}

// ---- convolutions ----

// sums[n, m, out...] of a direct convolution of centered operands.
std::vector<int64_t> int_conv(ThreadPool& pool, const ConvGeometry& g, const std::vector<int32_t>& x,
                              const std::vector<int32_t>& w) {
  const int64_t cpg = g.image_channels / g.group, mpg = g.col_channels / g.group;
  const int64_t in_size = g.in_size(), out_size = g.out_size(), k_size = g.kernel_size();
  std::vector<int64_t> out(static_cast<size_t>(g.batch * g.col_channels * out_size), 0);
  pool.parallel_for(g.batch * g.col_channels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t batch = p / g.col_channels, m = p % g.col_channels, group = m / mpg;
      int64_t* po = out.data() + p * out_size;
      for (int64_t od = 0; od < g.out[0]; ++od) {
        const TapRange rd = tap_range(g, 0, od);
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
          const TapRange rh = tap_range(g, 1, oh);
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            const TapRange rw = tap_range(g, 2, ow);
            int64_t sum = 0;
            for (int64_t c = 0; c < cpg; ++c) {
              const int32_t* xc = x.data() + (batch * g.image_channels + group * cpg + c) * in_size;
              const int32_t* wc = w.data() + (m * cpg + c) * k_size;
              for (int64_t kd = rd.lo; kd < rd.hi; ++kd) {
                const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
                for (int64_t kh = rh.lo; kh < rh.hi; ++kh) {
                  const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
                  const int32_t* xrow = xc + (id * g.in[1] + ih) * g.in[2];
                  const int32_t* wrow = wc + (kd * g.kernel[1] + kh) * g.kernel[2];
                  for (int64_t kw = rw.lo; kw < rw.hi; ++kw)
                    sum += static_cast<int64_t>(xrow[ow * g.stride[2] - g.pad_begin[2] + kw * g.dilation[2]]) * wrow[kw];
                }
              }
            }
            po[(od * g.out[1] + oh) * g.out[2] + ow] = sum;
          }
        }
      }
    }
  });
  return out;
}

struct ConvOperands {
  ConvGeometry g;
  std::vector<int32_t> x, w;
};

// X's zero point is per tensor; W's per tensor or per output channel.
ConvOperands conv_operands(const SpatialAttrs& attrs, const Tensor& x, const Tensor* x_zp, const Tensor& w,
                           const Tensor* w_zp, const char* op) {
  ConvOperands o;
  OT_CHECK(x.rank() >= 3 && w.rank() == x.rank(), op, ": X ", x.str(), " and W ", w.str(),
           " must be [N, C, spatial...] and [M, C/group, kernel...]");
  o.g = conv_geometry(attrs, x.shape(), w.shape());
  if (x_zp) OT_CHECK(x_zp->dtype() == x.dtype(), op, ": x_zero_point's element type differs from X's");
  if (w_zp) OT_CHECK(w_zp->dtype() == w.dtype(), op, ": w_zero_point's element type differs from W's");
  const std::vector<int32_t> xzp = zero_points(x_zp, 1, op, "x_zero_point");
  const int64_t m = o.g.col_channels, per_channel = w.numel() / std::max<int64_t>(1, m);
  const std::vector<int32_t> wzp = zero_points(w_zp, m, op, "w_zero_point");
  o.x = centered(x, xzp, [](int64_t) { return 0; }, op, "X");
  o.w = centered(w, wzp, [&](int64_t i) { return i / per_channel; }, op, "W");
  return o;
}

class ConvIntegerKernel final : public Kernel {
 public:
  explicit ConvIntegerKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const ConvOperands o = conv_operands(attrs_, ctx.input(0), optional_input(ctx, 2), ctx.input(1),
                                         optional_input(ctx, 3), "ConvInteger");
    const std::vector<int64_t> sums = int_conv(ctx.threads(), o.g, o.x, o.w);
    int32_t* y = ctx.allocate_output(0, DType::Int32, o.g.col_shape()).data<int32_t>();
    for (size_t i = 0; i < sums.size(); ++i) y[i] = static_cast<int32_t>(sums[i]);
  }

 private:
  SpatialAttrs attrs_;
};

class QLinearConvKernel final : public Kernel {
 public:
  explicit QLinearConvKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const char* op = "QLinearConv";
    const ConvOperands o = conv_operands(attrs_, ctx.input(0), optional_input(ctx, 2), ctx.input(3),
                                         optional_input(ctx, 5), op);
    const int64_t m = o.g.col_channels, out_size = o.g.out_size();
    const float x_scale = scales(ctx.input(1), 1, op, "x_scale")[0];
    const std::vector<float> w_scale = scales(ctx.input(4), m, op, "w_scale");
    const float y_scale = scales(ctx.input(6), 1, op, "y_scale")[0];
    const Tensor* y_zp = optional_input(ctx, 7);
    std::vector<int64_t> sums = int_conv(ctx.threads(), o.g, o.x, o.w);
    if (ctx.has_input(8)) {
      const Tensor& bias = ctx.input(8);
      OT_CHECK(bias.dtype() == DType::Int32 && bias.rank() == 1 && bias.numel() == m, op, ": the bias ", bias.str(),
               " must be int32 with one value per output channel (", m, ")");
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += bias.data<int32_t>()[(static_cast<int64_t>(i) / out_size) % m];
    }
    Tensor& y = ctx.allocate_output(0, requantized_type(y_zp, op), o.g.col_shape());
    requantize(sums, [&](int64_t i) {
      return multiplier_of(x_scale, w_scale[static_cast<size_t>((i / out_size) % m)], y_scale);
    }, y_zp, y, op);
  }

 private:
  SpatialAttrs attrs_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "MatMulInteger", kernel_factory(&matmul_integer), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "QLinearMatMul", kernel_factory(&qlinear_matmul), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ConvInteger", kernel_factory<ConvIntegerKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "QLinearConv", kernel_factory<QLinearConvKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
