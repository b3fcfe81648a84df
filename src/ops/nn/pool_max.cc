// MaxPool (1-D to 3-D, strides, pads, dilations, ceil_mode, auto_pad, optional Indices with
// storage_order) and GlobalMaxPool, with their gradients.
//
// The backward kernels recompute each window's argmax from X instead of saving indices: X is
// almost always stashed anyway (it is the output of the Relu before the pool, which ReluGrad
// keeps), so this stashes nothing extra, and rescanning X costs one pass of compares.
// Ties and NaN follow PyTorch 1.13: the first maximum in window order wins, a NaN beats
// everything (the last NaN in the window), so gradients land where torch puts them.
#include <cmath>
#include <limits>
#include <type_traits>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/conv_common.h"
#include "ops/nn/pool_max_2x2_simd.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Whether v replaces best as a window's maximum: strictly greater, or NaN. Written as integer
// flags so that even the scalar code (rows shorter than a vector) has no branches: with random
// data a compare-and-branch mispredicts half the time, which made pooling 5x slower.
template <typename T>
int takes_over(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<int>(v > best) | static_cast<int>(v != v);
  } else {
    return static_cast<int>(v > best);
  }
}

// max(best, v) with NaN winning: maxss, then a conditional move for NaN.
template <typename T>
T pick(T best, T v) {
  const T m = v > best ? v : best;
  if constexpr (std::is_floating_point_v<T>) {
    return v != v ? v : m;
  } else {
    return m;
  }
}

// MaxPool2d(2) with whole windows, the pooling of most CNNs: branch-free loops over a row of
// windows that the compiler vectorizes (a compare per element mispredicts half the time).
bool is_plain_2x2(const ConvGeometry& g) {
  return g.spatial == 2 && g.kernel[1] == 2 && g.kernel[2] == 2 && g.stride[1] == 2 && g.stride[2] == 2 &&
         g.dilation[1] == 1 && g.dilation[2] == 1 && g.pad_begin[1] == 0 && g.pad_begin[2] == 0 &&
         2 * g.out[1] <= g.in[1] && 2 * g.out[2] <= g.in[2];
}

template <typename T>
void max_pool_2x2_plane(const ConvGeometry& g, const T* x, T* y) {
  const int64_t IW = g.in[2], OW = g.out[2];
  for (int64_t oh = 0; oh < g.out[1]; ++oh) {
    const T* a = x + 2 * oh * IW;
    const T* b = a + IW;
    T* yo = y + oh * OW;
    int64_t ow = 0;
    if constexpr (std::is_same_v<T, float> && pool_simd::kAvailable) ow = pool_simd::forward_row(a, b, yo, OW);
    for (; ow < OW; ++ow)
      yo[ow] = pick(pick(pick(a[2 * ow], a[2 * ow + 1]), b[2 * ow]), b[2 * ow + 1]);
  }
}

// One row of windows: rows a, b of X, their gradient rows da, db (distinct memory). The winner
// of each window is found with integer selects (no branches), then dY goes to its position.
template <typename T>
void max_pool_2x2_grad_row(const T* __restrict a, const T* __restrict b, const T* __restrict dy, T* __restrict da,
                           T* __restrict db, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    const T p = a[2 * ow], q = a[2 * ow + 1], r = b[2 * ow], s = b[2 * ow + 1];
    int k = 0;
    T m = p;
    int c = takes_over(q, m);
    k = c ? 1 : k;
    m = c ? q : m;
    c = takes_over(r, m);
    k = c ? 2 : k;
    m = c ? r : m;
    c = takes_over(s, m);
    k = c ? 3 : k;
    const T v = dy[ow];
    da[2 * ow] = k == 0 ? v : T(0);
    da[2 * ow + 1] = k == 1 ? v : T(0);
    db[2 * ow] = k == 2 ? v : T(0);
    db[2 * ow + 1] = k == 3 ? v : T(0);
  }
}

template <typename T>
void max_pool_2x2_grad_plane(const ConvGeometry& g, const T* x, const T* dy, T* dx) {
  const int64_t IH = g.in[1], IW = g.in[2], OW = g.out[2];
  if (2 * g.out[1] != IH || 2 * OW != IW) std::fill(dx, dx + IH * IW, T(0));  // rows/columns no window covers
  for (int64_t oh = 0; oh < g.out[1]; ++oh) {
    const T* a = x + 2 * oh * IW;
    T* da = dx + 2 * oh * IW;
    int64_t done = 0;
    if constexpr (std::is_same_v<T, float> && pool_simd::kAvailable)
      done = pool_simd::grad_row(a, a + IW, dy + oh * OW, da, da + IW, OW);
    max_pool_2x2_grad_row(a + 2 * done, a + IW + 2 * done, dy + oh * OW + done, da + 2 * done, da + IW + 2 * done,
                          OW - done);
  }
}

// Calls visit(o, max, offset) for every output position o of one plane, offset being the
// row-major position of the maximum in the plane (-1 for a window that holds no element).
// Without kArg offsets are not tracked and visit gets -1.
template <bool kArg, typename T, typename Visit>
void max_pool_plane(const ConvGeometry& g, const PoolTaps& taps, const T* x, Visit visit) {
  const int64_t OW = g.out[2], sw = g.stride[2];
  // -inf rather than lowest(): a window of -inf must give -inf.
  const T init = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                      : std::numeric_limits<T>::lowest();
  T best[kPoolBlock];
  int64_t arg[kPoolBlock];
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow0 = 0; ow0 < OW; ow0 += kPoolBlock) {
        const int64_t n = std::min(kPoolBlock, OW - ow0);
        std::fill(best, best + n, init);
        if (kArg) std::fill(arg, arg + n, int64_t(-1));
        for_each_block_tap(g, taps, od, oh, ow0, n, [&](int64_t row, int64_t off, int64_t j0, int64_t j1) {
          const int64_t base = row + off;
          if constexpr (kArg) {
            for (int64_t j = j0; j < j1; ++j) {
              const T v = x[base + j * sw];
              const bool take = (arg[j] < 0) | takes_over(v, best[j]);
              best[j] = take ? v : best[j];
              arg[j] = take ? base + j * sw : arg[j];
            }
          } else {
            for (int64_t j = j0; j < j1; ++j) best[j] = pick(best[j], x[base + j * sw]);
          }
        });
        for (int64_t j = 0; j < n; ++j) visit(o + j, best[j], kArg ? arg[j] : int64_t(-1));
        o += n;
      }
}

class MaxPoolKernel final : public Kernel {
 public:
  explicit MaxPoolKernel(const KernelInfo& info)
      : attrs_(info.node), column_major_(info.node.attr_int("storage_order", 0) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const ConvGeometry g = pool_geometry(attrs_, x.shape(), "MaxPool");
    Tensor& y = ctx.allocate_output(0, x.dtype(), g.col_shape());
    int64_t* indices = nullptr;
    if (ctx.output_needed(1)) indices = ctx.allocate_output(1, DType::Int64, g.col_shape()).data<int64_t>();
    const PoolTaps taps = pool_taps(g, ctx.scratch(pool_taps_bytes(g)));
    const int64_t IS = g.in_size(), OS = g.out_size(), ID = g.in[0], IH = g.in[1], IW = g.in[2];
    dispatch_numeric(x.dtype(), "MaxPool", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      if (!indices && is_plain_2x2(g)) {
        for_each_plane(ctx.threads(), g, [&](int64_t p) { max_pool_2x2_plane(g, px + p * IS, py + p * OS); });
        return;
      }
      if (!indices) {
        for_each_plane(ctx.threads(), g, [&](int64_t p) {
          T* yp = py + p * OS;
          max_pool_plane<false>(g, taps, px + p * IS, [&](int64_t o, T best, int64_t) { yp[o] = best; });
        });
        return;
      }
      for_each_plane(ctx.threads(), g, [&](int64_t p) {
        T* yp = py + p * OS;
        int64_t* ip = indices + p * OS;
        max_pool_plane<true>(g, taps, px + p * IS, [&](int64_t o, T best, int64_t arg) {
          yp[o] = best;
          // ONNX's Indices: flat positions in X, without padding; storage_order 1 counts the
          // spatial axes column-major (first spatial axis fastest), as ONNX Runtime does.
          int64_t at = arg < 0 ? 0 : arg;
          if (column_major_) {
            const int64_t iw = at % IW, ih = (at / IW) % IH, id = at / (IW * IH);
            at = id + ih * ID + iw * ID * IH;
          }
          ip[o] = p * IS + at;
        });
      });
    });
  }

 private:
  SpatialAttrs attrs_;
  bool column_major_;
};

// Inputs: dY, X. Attributes: MaxPool's.
class MaxPoolGradKernel final : public Kernel {
 public:
  explicit MaxPoolGradKernel(const KernelInfo& info) : attrs_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    check_same_dtype(dy, "dY", x, "X");
    const ConvGeometry g = pool_geometry(attrs_, x.shape(), "MaxPoolGrad");
    OT_CHECK(dy.shape() == g.col_shape(), "dY ", dy.str(), " does not have MaxPool's output shape ",
             g.col_shape().str());
    Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
    const PoolTaps taps = pool_taps(g, ctx.scratch(pool_taps_bytes(g)));
    const int64_t IS = g.in_size(), OS = g.out_size();
    dispatch_float(x.dtype(), "MaxPoolGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      const T* pdy = dy.data<T>();
      T* pdx = dx.data<T>();
      if (is_plain_2x2(g)) {
        for_each_plane(ctx.threads(), g, [&](int64_t p) {
          max_pool_2x2_grad_plane(g, px + p * IS, pdy + p * OS, pdx + p * IS);
        });
        return;
      }
      for_each_plane(ctx.threads(), g, [&](int64_t p) {
        T* dxp = pdx + p * IS;
        const T* dyp = pdy + p * OS;
        std::fill(dxp, dxp + IS, T(0));
        max_pool_plane<true>(g, taps, px + p * IS, [&](int64_t o, T, int64_t arg) {
          if (arg >= 0) dxp[arg] += dyp[o];
        });
      });
    });
  }

 private:
  SpatialAttrs attrs_;
};

template <typename T>
int64_t plane_argmax(const T* x, int64_t size) {
  int64_t arg = 0;
  for (int64_t i = 1; i < size; ++i)
    if (takes_over(x[i], x[arg])) arg = i;
  return arg;
}

void global_max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), global_pool_shape(x.shape(), "GlobalMaxPool"));
  dispatch_numeric(x.dtype(), "GlobalMaxPool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_each_global_plane(ctx.threads(), x.shape(), [&](int64_t p, int64_t size) {
      const T* plane = px + p * size;
      py[p] = size == 0 ? std::numeric_limits<T>::lowest() : plane[plane_argmax(plane, size)];
    });
  });
}

// Inputs: dY, X. The gradient goes to the first maximum, as torch's adaptive_max_pool does.
void global_max_pool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  check_same_dtype(dy, "dY", x, "X");
  const TensorShape y_shape = global_pool_shape(x.shape(), "GlobalMaxPoolGrad");
  OT_CHECK(dy.shape() == y_shape, "dY ", dy.str(), " does not have GlobalMaxPool's output shape ", y_shape.str());
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_float(x.dtype(), "GlobalMaxPoolGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    for_each_global_plane(ctx.threads(), x.shape(), [&](int64_t p, int64_t size) {
      T* plane = pdx + p * size;
      std::fill(plane, plane + size, T(0));
      if (size > 0) plane[plane_argmax(px + p * size, size)] = pdy[p];
    });
  });
}

void max_pool_gradient(GradBuilder& g) {
  AttributeMap attrs = g.node().attrs;
  attrs.erase("storage_order");  // only shapes the Indices output
  g.set_input_grad(0, g.op("MaxPoolGrad", {g.output_grad(0), g.input(0)}, attrs, kOnnxTrainDomain));
}

void global_max_pool_gradient(GradBuilder& g) {
  g.set_input_grad(0, g.op("GlobalMaxPoolGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "MaxPool", kernel_factory<MaxPoolKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MaxPoolGrad", kernel_factory<MaxPoolGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "GlobalMaxPool", kernel_factory(&global_max_pool), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GlobalMaxPoolGrad", kernel_factory(&global_max_pool_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "MaxPool", max_pool_gradient);
ONNXTRAIN_GRADIENT("", "GlobalMaxPool", global_max_pool_gradient);

// The indices are chosen by comparing values; storage_order 1 lays the flat indices out
// column-major, and the audit judges those exactly instead.
static AuditedOutput max_pool_audited_output(const Node& node, size_t index) {
  return index == 1 && node.attr_int("storage_order", 0) == 0 ? AuditedOutput::SelectedIndex : AuditedOutput::Value;
}
ONNXTRAIN_AUDITED_OUTPUTS("", "MaxPool", max_pool_audited_output);

}  // namespace onnxtrain
