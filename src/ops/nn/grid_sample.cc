// GridSample (opset 16, 4-D input) and ai.onnxtrain::GridSampleGrad, its gradient for the input
// and the grid. Sampling follows torch.nn.functional.grid_sample (PyTorch 1.13, 2-D):
//   - grid (x, y) in [-1, 1] maps to pixel coordinates: align_corners 1 puts -1 and 1 at the
//     centers of the corner pixels, align_corners 0 at their outer edges;
//   - bilinear and nearest apply the padding mode to the coordinate (border clamps it,
//     reflection mirrors it at the edges, zeros leaves it), then read taps outside the image as 0;
//   - bicubic (A = -0.75) applies the padding mode to each of its 16 taps instead;
//   - nearest rounds half to even (std::nearbyint), and its gradient w.r.t. the grid is zero.
// Each output point is a weighted sum of taps; the weights' derivatives w.r.t. the pixel
// coordinate, times the coordinate's derivative w.r.t. the grid value, give the grid gradient.
#include <cmath>
#include <cstring>
#include <limits>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

struct Options {
  Mode mode;
  Padding padding;
  bool align_corners;
};

Options parse_options(const Node& node) {
  Options o;
  const std::string mode = node.attr_string("mode", "bilinear");
  if (mode == "bilinear") o.mode = Mode::Bilinear;
  else if (mode == "nearest") o.mode = Mode::Nearest;
  else if (mode == "bicubic") o.mode = Mode::Bicubic;
  else throw UnsupportedError(str_cat("GridSample: mode '", mode, "' is not one of bilinear, nearest, bicubic"));
  const std::string padding = node.attr_string("padding_mode", "zeros");
  if (padding == "zeros") o.padding = Padding::Zeros;
  else if (padding == "border") o.padding = Padding::Border;
  else if (padding == "reflection") o.padding = Padding::Reflection;
  else throw UnsupportedError(str_cat("GridSample: padding_mode '", padding, "' is not one of zeros, border, reflection"));
  o.align_corners = node.attr_int("align_corners", 0) != 0;
  return o;
}

// A coordinate value with its derivative w.r.t. the grid value it came from.
struct Coord {
  double value, grad;
};

Coord unnormalize(double v, int64_t size, bool align_corners) {
  if (align_corners) return {(v + 1) / 2 * static_cast<double>(size - 1), static_cast<double>(size - 1) / 2};
  return {((v + 1) * static_cast<double>(size) - 1) / 2, static_cast<double>(size) / 2};
}

Coord clip(Coord c, int64_t size) {
  const double hi = static_cast<double>(size - 1);
  if (c.value <= 0) return {0, 0};
  if (c.value >= hi) return {hi, 0};
  return c;
}

// Mirrors c into [twice_low / 2, twice_high / 2].
Coord reflect(Coord c, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return {0, 0};
  const double low = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
  double in = c.value - low, sign = 1;
  if (in < 0) {
    in = -in;
    sign = -1;
  }
  const double extra = std::fmod(in, span);
  const bool even = static_cast<int64_t>(std::floor(in / span)) % 2 == 0;
  return even ? Coord{extra + low, sign * c.grad} : Coord{span - extra + low, -sign * c.grad};
}

Coord apply_padding(Coord c, int64_t size, const Options& o) {
  if (o.padding == Padding::Border) return clip(c, size);
  if (o.padding == Padding::Reflection) {
    c = o.align_corners ? reflect(c, 0, 2 * (size - 1)) : reflect(c, -1, 2 * size - 1);
    return clip(c, size);
  }
  return c;
}

// Coordinates too large for an index (or NaN) read as outside the image, as in PyTorch.
int64_t to_index(double v) {
  if (!(std::abs(v) < 1e15)) return -100;
  return static_cast<int64_t>(v);
}

struct Tap {
  int64_t offset;  // h * W + w, within the image
  double weight, dw_dx, dw_dy;
};

struct SamplePoint {
  Tap taps[16];
  int count = 0;
  double dx_dgrid = 0, dy_dgrid = 0;  // derivative of the pixel coordinates w.r.t. grid x, y

  void add(int64_t h, int64_t w, int64_t H, int64_t W, double weight, double dw_dx, double dw_dy) {
    if (h >= 0 && h < H && w >= 0 && w < W) taps[count++] = {h * W + w, weight, dw_dx, dw_dy};
  }
};

double cubic_near(double t, double a) { return ((a + 2) * t - (a + 3)) * t * t + 1; }  // |t| <= 1
double cubic_far(double t, double a) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; }  // 1 < |t| < 2
double cubic_near_grad(double t, double a) { return (3 * (a + 2) * t - 2 * (a + 3)) * t; }
double cubic_far_grad(double t, double a) { return (3 * a * t - 10 * a) * t + 8 * a; }

void cubic_weights(double t, double* w, double* dw) {
  constexpr double a = -0.75;
  w[0] = cubic_far(t + 1, a);
  w[1] = cubic_near(t, a);
  w[2] = cubic_near(1 - t, a);
  w[3] = cubic_far(2 - t, a);
  dw[0] = cubic_far_grad(t + 1, a);
  dw[1] = cubic_near_grad(t, a);
  dw[2] = -cubic_near_grad(1 - t, a);
  dw[3] = -cubic_far_grad(2 - t, a);
}

SamplePoint sample_point(double gx, double gy, int64_t H, int64_t W, const Options& o) {
  SamplePoint p;
  Coord cx = unnormalize(gx, W, o.align_corners), cy = unnormalize(gy, H, o.align_corners);
  if (o.mode == Mode::Bicubic) {
    p.dx_dgrid = cx.grad;
    p.dy_dgrid = cy.grad;
    if (!std::isfinite(cx.value) || !std::isfinite(cy.value)) return p;
    const double x0 = std::floor(cx.value), y0 = std::floor(cy.value);
    double wx[4], dwx[4], wy[4], dwy[4];
    cubic_weights(cx.value - x0, wx, dwx);
    cubic_weights(cy.value - y0, wy, dwy);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        // Padding moves each tap, not the sample point; the grid gradient does not see it.
        const int64_t h = to_index(apply_padding({y0 - 1 + j, 0}, H, o).value);
        const int64_t w = to_index(apply_padding({x0 - 1 + i, 0}, W, o).value);
        p.add(h, w, H, W, wx[i] * wy[j], dwx[i] * wy[j], wx[i] * dwy[j]);
      }
    return p;
  }
  cx = apply_padding(cx, W, o);
  cy = apply_padding(cy, H, o);
  p.dx_dgrid = cx.grad;
  p.dy_dgrid = cy.grad;
  if (o.mode == Mode::Nearest) {
    p.dx_dgrid = p.dy_dgrid = 0;
    p.add(to_index(std::nearbyint(cy.value)), to_index(std::nearbyint(cx.value)), H, W, 1, 0, 0);
    return p;
  }
  if (!std::isfinite(cx.value) || !std::isfinite(cy.value)) return p;
  const double x0 = std::floor(cx.value), y0 = std::floor(cy.value);
  const double fx = cx.value - x0, fy = cy.value - y0;
  const int64_t w0 = to_index(x0), h0 = to_index(y0);
  if (w0 == -100 || h0 == -100) return p;
  p.add(h0, w0, H, W, (1 - fx) * (1 - fy), -(1 - fy), -(1 - fx));
  p.add(h0, w0 + 1, H, W, fx * (1 - fy), 1 - fy, -fx);
  p.add(h0 + 1, w0, H, W, (1 - fx) * fy, -fy, 1 - fx);
  p.add(h0 + 1, w0 + 1, H, W, fx * fy, fy, fx);
  return p;
}

struct Geometry {
  int64_t N, C, H, W, HO, WO;
};

Geometry check_shapes(const Tensor& x, const Tensor& grid, const char* what) {
  OT_CHECK(x.rank() == 4, what, ": only 4-D input [N, C, H, W] is supported, got ", x.str());
  OT_CHECK(grid.rank() == 4 && grid.dim(0) == x.dim(0) && grid.dim(3) == 2, what, ": grid ", grid.str(),
           " must be [N, H_out, W_out, 2] for input ", x.str());
  OT_CHECK(x.dtype() == grid.dtype(), what, ": input ", x.str(), " and grid ", grid.str(),
           " must have the same element type");
  OT_CHECK(x.dim(2) > 0 && x.dim(3) > 0, what, ": input ", x.str(), " has an empty image");
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), grid.dim(1), grid.dim(2)};
}

class GridSampleKernel final : public Kernel {
 public:
  explicit GridSampleKernel(const KernelInfo& info) : options_(parse_options(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& grid = ctx.input(1);
    const Geometry g = check_shapes(x, grid, "GridSample");
    Tensor& y = ctx.allocate_output(0, x.dtype(), TensorShape{g.N, g.C, g.HO, g.WO});
    if (y.numel() == 0) return;
    dispatch_float(x.dtype(), "GridSample", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xv = x.data<T>();
      const T* gv = grid.data<T>();
      T* yv = y.data<T>();
      const int64_t points = g.HO * g.WO, plane = g.H * g.W;
      ctx.threads().parallel_for(g.N * points, std::max<int64_t>(1, kParallelGrain / (16 * g.C + 1)),
                                 [&](int64_t p0, int64_t p1) {
                                   for (int64_t p = p0; p < p1; ++p) {
                                     const int64_t n = p / points, q = p % points;
                                     const SamplePoint s =
                                         sample_point(gv[2 * p], gv[2 * p + 1], g.H, g.W, options_);
                                     for (int64_t c = 0; c < g.C; ++c) {
                                       const T* img = xv + (n * g.C + c) * plane;
                                       double sum = 0;
                                       for (int t = 0; t < s.count; ++t) sum += s.taps[t].weight * img[s.taps[t].offset];
                                       yv[(n * g.C + c) * points + q] = static_cast<T>(sum);
                                     }
                                   }
                                 });
    });
  }

 private:
  Options options_;
};

// GridSampleGrad(dY, X, grid) -> (dX, dGrid). dX is a scatter-add of dY times the tap weights;
// batch entries touch disjoint parts of it, so they are what the threads split.
class GridSampleGradKernel final : public Kernel {
 public:
  explicit GridSampleGradKernel(const KernelInfo& info) : options_(parse_options(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& grid = ctx.input(2);
    const Geometry g = check_shapes(x, grid, "GridSampleGrad");
    OT_CHECK(dy.shape() == TensorShape({g.N, g.C, g.HO, g.WO}), "GridSampleGrad: dY ", dy.str(),
             " must have the shape of GridSample's output for input ", x.str(), " and grid ", grid.str());
    const bool want_dx = ctx.output_needed(0), want_dgrid = ctx.num_outputs() > 1 && ctx.output_needed(1);
    Tensor* dx = want_dx ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dgrid = want_dgrid ? &ctx.allocate_output(1, grid.dtype(), grid.shape()) : nullptr;
    if (dx) std::memset(dx->raw_data(), 0, dx->nbytes());
    if (dgrid) std::memset(dgrid->raw_data(), 0, dgrid->nbytes());
    dispatch_float(x.dtype(), "GridSampleGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xv = x.data<T>();
      const T* gv = grid.data<T>();
      const T* dyv = dy.data<T>();
      T* dxv = dx ? dx->data<T>() : nullptr;
      T* dgv = dgrid ? dgrid->data<T>() : nullptr;
      const int64_t points = g.HO * g.WO, plane = g.H * g.W;
      ctx.threads().parallel_for(g.N, 1, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t q = 0; q < points; ++q) {
            const int64_t p = n * points + q;
            const SamplePoint s = sample_point(gv[2 * p], gv[2 * p + 1], g.H, g.W, options_);
            double gx = 0, gy = 0;
            for (int64_t c = 0; c < g.C; ++c) {
              const double d = static_cast<double>(dyv[(n * g.C + c) * points + q]);
              const T* img = xv + (n * g.C + c) * plane;
              T* dimg = dxv ? dxv + (n * g.C + c) * plane : nullptr;
              for (int t = 0; t < s.count; ++t) {
                const Tap& tap = s.taps[t];
                if (dimg) dimg[tap.offset] += static_cast<T>(tap.weight * d);
                const double v = static_cast<double>(img[tap.offset]) * d;
                gx += tap.dw_dx * v;
                gy += tap.dw_dy * v;
              }
            }
            if (dgv) {
              dgv[2 * p] = static_cast<T>(gx * s.dx_dgrid);
              dgv[2 * p + 1] = static_cast<T>(gy * s.dy_dgrid);
            }
          }
      });
    });
  }

 private:
  Options options_;
};

void grid_sample_gradient(GradBuilder& g) {
  const Node& n = g.node();
  const Options o = parse_options(n);  // refuses unknown modes before anything is emitted
  (void)o;
  AttributeMap attrs{{"mode", Attribute::of_string(n.attr_string("mode", "bilinear"))},
                     {"padding_mode", Attribute::of_string(n.attr_string("padding_mode", "zeros"))},
                     {"align_corners", Attribute::of_int(n.attr_int("align_corners", 0))}};
  std::vector<std::string> d =
      g.op_multi("GridSampleGrad", {g.output_grad(0), g.input(0), g.input(1)}, 2, attrs, kOnnxTrainDomain);
  for (int i = 0; i < 2; ++i) {
    same_dtype(g, d[static_cast<size_t>(i)], g.input(i));
    if (g.needs_input_grad(i)) g.set_input_grad(i, d[static_cast<size_t>(i)]);
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "GridSample", kernel_factory<GridSampleKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "GridSampleGrad", kernel_factory<GridSampleGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "GridSample", grid_sample_gradient);
// ONNX calls the grid non-differentiable; torch.nn.functional.grid_sample differentiates it.
ONNXTRAIN_DIFFERENTIABLE_INPUT("", "GridSample", 1);

}  // namespace onnxtrain
