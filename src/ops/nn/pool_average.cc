// AveragePool (1-D to 3-D, strides, pads, ceil_mode, auto_pad, count_include_pad) and
// GlobalAveragePool, with their gradients. The backward kernels need only dY and X's shape, so
// nothing of the forward is stashed.
//
// Divisor (as PyTorch 1.13 and ONNX Runtime): the taps inside X, or with count_include_pad the
// taps inside X plus its explicit pads; taps that ceil_mode pushes past the end padding never
// count.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/conv_common.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// 1 / divisor for the output positions ow0 + j, j < n, of row (od, oh); 0 for a window without
// any tap inside X.
template <typename T>
void block_scales(const ConvGeometry& g, const PoolTaps& taps, bool count_pad, int64_t od, int64_t oh, int64_t ow0,
                  int64_t n, T* scale) {
  const TapRange& rd = taps.axis[0][od];
  const TapRange& rh = taps.axis[1][oh];
  const bool rows_empty = rd.hi <= rd.lo || rh.hi <= rh.lo;
  const int64_t outer = count_pad ? rd.hi_pad * rh.hi_pad : (rd.hi - rd.lo) * (rh.hi - rh.lo);
  for (int64_t j = 0; j < n; ++j) {
    const TapRange& rw = taps.axis[2][ow0 + j];
    const int64_t count = outer * (count_pad ? rw.hi_pad : rw.hi - rw.lo);
    scale[j] = rows_empty || rw.hi <= rw.lo || count <= 0 ? T(0) : T(1) / static_cast<T>(count);
  }
}

// Calls block(od, oh, ow0, n, o) for every block of output positions of one plane, o being the
// flat output index of position ow0.
template <typename Fn>
void for_each_block(const ConvGeometry& g, Fn block) {
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow0 = 0; ow0 < g.out[2]; ow0 += kPoolBlock) {
        const int64_t n = std::min(kPoolBlock, g.out[2] - ow0);
        block(od, oh, ow0, n, o);
        o += n;
      }
}

class AveragePoolKernel final : public Kernel {
 public:
  explicit AveragePoolKernel(const KernelInfo& info)
      : attrs_(info.node), count_pad_(info.node.attr_int("count_include_pad", 0) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const ConvGeometry g = pool_geometry(attrs_, x.shape(), "AveragePool");
    Tensor& y = ctx.allocate_output(0, x.dtype(), g.col_shape());
    const PoolTaps taps = pool_taps(g, ctx.scratch(pool_taps_bytes(g)));
    const int64_t IS = g.in_size(), OS = g.out_size(), sw = g.stride[2];
    dispatch_float(x.dtype(), "AveragePool", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for_each_plane(ctx.threads(), g, [&](int64_t p) {
        const T* xp = px + p * IS;
        T* yp = py + p * OS;
        T sum[kPoolBlock], scale[kPoolBlock];
        for_each_block(g, [&](int64_t od, int64_t oh, int64_t ow0, int64_t n, int64_t o) {
          std::fill(sum, sum + n, T(0));
          for_each_block_tap(g, taps, od, oh, ow0, n, [&](int64_t row, int64_t off, int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) sum[j] += xp[row + off + j * sw];
          });
          block_scales(g, taps, count_pad_, od, oh, ow0, n, scale);
          for (int64_t j = 0; j < n; ++j) yp[o + j] = sum[j] * scale[j];
        });
      });
    });
  }

 private:
  SpatialAttrs attrs_;
  bool count_pad_;
};

// Inputs: dY, shape(X). Attributes: AveragePool's.
class AveragePoolGradKernel final : public Kernel {
 public:
  explicit AveragePoolGradKernel(const KernelInfo& info)
      : attrs_(info.node), count_pad_(info.node.attr_int("count_include_pad", 0) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const TensorShape x_shape = shape_input(ctx, 1, "shape of X");
    const ConvGeometry g = pool_geometry(attrs_, x_shape, "AveragePoolGrad");
    OT_CHECK(dy.shape() == g.col_shape(), "dY ", dy.str(), " does not have AveragePool's output shape ",
             g.col_shape().str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), x_shape);
    const PoolTaps taps = pool_taps(g, ctx.scratch(pool_taps_bytes(g)));
    const int64_t IS = g.in_size(), OS = g.out_size(), sw = g.stride[2];
    dispatch_float(dy.dtype(), "AveragePoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pdy = dy.data<T>();
      T* pdx = dx.data<T>();
      for_each_plane(ctx.threads(), g, [&](int64_t p) {
        T* dxp = pdx + p * IS;
        const T* dyp = pdy + p * OS;
        std::fill(dxp, dxp + IS, T(0));
        T share[kPoolBlock];
        for_each_block(g, [&](int64_t od, int64_t oh, int64_t ow0, int64_t n, int64_t o) {
          block_scales(g, taps, count_pad_, od, oh, ow0, n, share);
          for (int64_t j = 0; j < n; ++j) share[j] *= dyp[o + j];
          for_each_block_tap(g, taps, od, oh, ow0, n, [&](int64_t row, int64_t off, int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) dxp[row + off + j * sw] += share[j];
          });
        });
      });
    });
  }

 private:
  SpatialAttrs attrs_;
  bool count_pad_;
};

void global_average_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), global_pool_shape(x.shape(), "GlobalAveragePool"));
  dispatch_float(x.dtype(), "GlobalAveragePool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_each_global_plane(ctx.threads(), x.shape(), [&](int64_t p, int64_t size) {
      const T* plane = px + p * size;
      double sum = 0;  // planes can be long: accumulate float in double
      for (int64_t i = 0; i < size; ++i) sum += plane[i];
      py[p] = static_cast<T>(sum / static_cast<double>(size));
    });
  });
}

// Inputs: dY, shape(X).
void global_average_pool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const TensorShape x_shape = shape_input(ctx, 1, "shape of X");
  const TensorShape y_shape = global_pool_shape(x_shape, "GlobalAveragePoolGrad");
  OT_CHECK(dy.shape() == y_shape, "dY ", dy.str(), " does not have GlobalAveragePool's output shape ", y_shape.str());
  Tensor& dx = ctx.allocate_output(0, dy.dtype(), x_shape);
  dispatch_float(dy.dtype(), "GlobalAveragePoolGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    for_each_global_plane(ctx.threads(), x_shape, [&](int64_t p, int64_t size) {
      const T v = pdy[p] / static_cast<T>(size);
      std::fill(pdx + p * size, pdx + (p + 1) * size, v);
    });
  });
}

void average_pool_gradient(GradBuilder& g) {
  g.set_input_grad(
      0, g.op("AveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))}, g.node().attrs, kOnnxTrainDomain));
}

void global_average_pool_gradient(GradBuilder& g) {
  g.set_input_grad(
      0, g.op("GlobalAveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "AveragePool", kernel_factory<AveragePoolKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "AveragePoolGrad", kernel_factory<AveragePoolGradKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL("", "GlobalAveragePool", kernel_factory(&global_average_pool),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GlobalAveragePoolGrad", kernel_factory(&global_average_pool_grad),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "AveragePool", average_pool_gradient);
ONNXTRAIN_GRADIENT("", "GlobalAveragePool", global_average_pool_gradient);

}  // namespace onnxtrain
