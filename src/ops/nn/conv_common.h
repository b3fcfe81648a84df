#pragma once
// Shared by Conv, ConvTranspose and the pooling ops: spatial attributes, the output-shape rules
// (explicit pads, auto_pad, ceil_mode, output_shape) and the im2col + GEMM convolution primitives.
//
// Every op is described as the convolution it computes. Its "image" is that convolution's input
// side (Conv's X, ConvTranspose's Y, a pool's X) and its "columns" the output side (Conv's Y,
// ConvTranspose's X, a pool's Y). Image position = column position * stride - pad_begin +
// tap * dilation. So ConvTranspose's forward is a Conv's data gradient and vice versa, and all
// four compute paths share the three primitives below.
#include <algorithm>
#include <array>
#include <vector>

#include "ir/graph.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

class KernelContext;

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

// Spatial attributes as written on the node, parsed once; empty vectors mean "default".
struct SpatialAttrs {
  explicit SpatialAttrs(const Node& node);

  AutoPad auto_pad = AutoPad::NotSet;
  std::vector<int64_t> kernel_shape, strides, pads, dilations;
  std::vector<int64_t> output_padding, output_shape;  // ConvTranspose
  int64_t group = 1;                                  // Conv, ConvTranspose
  bool ceil_mode = false;                             // pooling
};

inline constexpr int kMaxSpatial = 3;

// Integer division rounding down / up, for numerators of either sign and a positive divisor.
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// Spatial dims are right-aligned into kMaxSpatial slots; unused leading slots have size 1, so
// 1-D, 2-D and 3-D ops run through the same loops.
struct ConvGeometry {
  int spatial = 0;
  int64_t batch = 0;
  int64_t image_channels = 0;  // channels on the image side (C of Conv)
  int64_t col_channels = 0;    // channels on the column side (M of Conv)
  int64_t group = 1;
  std::array<int64_t, kMaxSpatial> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1},
      dilation{1, 1, 1}, pad_begin{0, 0, 0}, pad_end{0, 0, 0};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  TensorShape image_shape() const;  // [N, image_channels, in...]
  TensorShape col_shape() const;    // [N, col_channels, out...]
  TensorShape weight_shape() const;  // [col_channels, image_channels / group, kernel...]
  // 1x1 taps at stride 1 without padding: the image is its own column matrix.
  bool is_pointwise() const;
};

// Conv: X [N, C, D...], W [M, C/group, k...]. Columns: Y.
ConvGeometry conv_geometry(const SpatialAttrs& a, const TensorShape& x, const TensorShape& w);
// ConvTranspose: X [N, C, D...], W [C, M/group, k...]. Image: Y; columns: X.
ConvGeometry conv_transpose_geometry(const SpatialAttrs& a, const TensorShape& x, const TensorShape& w);
// MaxPool / AveragePool over X [N, C, D...]; kernel_shape is required.
ConvGeometry pool_geometry(const SpatialAttrs& a, const TensorShape& x, const char* op);

// The three convolution primitives (conv_im2col.cc), T = float or double. Each takes its scratch
// memory from ctx exactly once, splits the batch (or the GEMMs) across ctx's pool, and overwrites
// its output.
//   cols[n, m, :]  = sum_c W[m, c, taps] * image[n, c, taps] (+ bias[m])
template <typename T>
void conv_image_to_cols(KernelContext& ctx, const ConvGeometry& g, const T* image, const T* weight, const T* bias,
                        T* cols);
//   image[n, c, :] = adjoint of the above applied to cols (+ bias[c])
template <typename T>
void conv_cols_to_image(KernelContext& ctx, const ConvGeometry& g, const T* cols, const T* weight, const T* bias,
                        T* image);
//   weight[m, c, taps] = sum_n cols[n, m, :] . image[n, c, taps]
template <typename T>
void conv_weight_grad(KernelContext& ctx, const ConvGeometry& g, const T* image, const T* cols, T* weight);

// Kernel-side checks shared by the conv and pool kernels.
void check_same_dtype(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name);
// Input i of a backward kernel that carries a forward tensor's shape (1-D int64).
TensorShape shape_input(const KernelContext& ctx, int i, const char* name);

// Kernel taps [lo, hi) of column position o (along one axis) that land inside [0, n), and the
// inclusive-padding tap limit hi_pad (taps below it fall in [-pad_begin, n + pad_end)).
struct TapRange {
  int64_t lo, hi, hi_pad;
};
TapRange tap_range(const ConvGeometry& g, int axis, int64_t o);

// The tap ranges of every column position on every axis, computed once per pooling call:
// axis[a][o] for o in [0, g.out[a]); and, for each innermost tap kw, the column positions
// [w_cols[kw].lo, w_cols[kw].hi) whose tap kw lands inside the image. `memory` holds
// pool_taps_bytes(g) bytes.
struct PoolTaps {
  std::array<const TapRange*, kMaxSpatial> axis;
  const TapRange* w_cols;
};
size_t pool_taps_bytes(const ConvGeometry& g);
PoolTaps pool_taps(const ConvGeometry& g, void* memory);

// Pooling walks output rows in blocks of kPoolBlock positions, tap by tap, so that the loop over
// a block's positions vectorizes (per-row buffers live on the stack).
inline constexpr int64_t kPoolBlock = 256;

// For one block of output row (od, oh), positions ow0 + j for j < n: calls tap(row, off, j0, j1)
// for every tap in window order; position ow0 + j, j in [j0, j1), reads the plane's element
// row + off + j * stride_w (the others fall in padding for this tap).
template <typename Fn>
void for_each_block_tap(const ConvGeometry& g, const PoolTaps& taps, int64_t od, int64_t oh, int64_t ow0, int64_t n,
                        Fn tap) {
  const TapRange& rd = taps.axis[0][od];
  const TapRange& rh = taps.axis[1][oh];
  const int64_t d0 = od * g.stride[0] - g.pad_begin[0], h0 = oh * g.stride[1] - g.pad_begin[1];
  for (int64_t kd = rd.lo; kd < rd.hi; ++kd)
    for (int64_t kh = rh.lo; kh < rh.hi; ++kh) {
      const int64_t row = ((d0 + kd * g.dilation[0]) * g.in[1] + h0 + kh * g.dilation[1]) * g.in[2];
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        const int64_t j0 = std::max(taps.w_cols[kw].lo, ow0) - ow0;
        const int64_t j1 = std::min(taps.w_cols[kw].hi, ow0 + n) - ow0;
        if (j0 < j1) tap(row, kw * g.dilation[2] - g.pad_begin[2] + ow0 * g.stride[2], j0, j1);
      }
    }
}

// Runs fn(plane) over the N*C image planes of a pooling op in parallel.
template <typename Fn>
void for_each_plane(ThreadPool& pool, const ConvGeometry& g, Fn fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, g.in_size()));
  pool.parallel_for(g.batch * g.image_channels, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) fn(p);
  });
}

// Global pools: X [N, C, ...] -> [N, C, 1, ...]; fn(plane, plane_size) runs over the N*C planes.
TensorShape global_pool_shape(const TensorShape& x, const char* op);
template <typename Fn>
void for_each_global_plane(ThreadPool& pool, const TensorShape& x, Fn fn) {
  const int64_t size = x.size_between(2, x.rank());
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, size));
  pool.parallel_for(x[0] * x[1], grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) fn(p, size);
  });
}

}  // namespace onnxtrain
