#include "ops/nn/conv_common.h"

#include <algorithm>

#include "core/checked_math.h"
#include "opdef/kernel.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

AutoPad parse_auto_pad(const std::string& s) {
  if (s.empty() || s == "NOTSET") return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  OT_THROW("attribute auto_pad is '", s, "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
}

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Slot of spatial axis i when `spatial` axes are right-aligned into kMaxSpatial slots.
int slot(int spatial, int i) { return kMaxSpatial - spatial + i; }

// Copies a per-axis attribute (absent: `fallback` on every axis) into the geometry's slots.
void put(std::array<int64_t, kMaxSpatial>& dst, const std::vector<int64_t>& v, int spatial, int64_t fallback,
         int64_t minimum, const char* name) {
  OT_CHECK(v.empty() || static_cast<int>(v.size()) == spatial, "attribute ", name, " ", join(v), " has ", v.size(),
           " values, the input has ", spatial, " spatial axes");
  for (int i = 0; i < spatial; ++i) {
    int64_t x = v.empty() ? fallback : v[static_cast<size_t>(i)];
    OT_CHECK(x >= minimum, "attribute ", name, " ", join(v), " must be >= ", minimum, " on every axis");
    dst[slot(spatial, i)] = x;
  }
}

int spatial_rank(const TensorShape& x, const char* op) {
  OT_CHECK(x.rank() >= 3, op, ": input X must be [N, C, spatial...], got ", x.str());
  const int spatial = x.rank() - 2;
  if (spatial > kMaxSpatial)
    throw UnsupportedError(str_cat(op, ": ", spatial, "-D inputs are not supported (1-D to 3-D), X is ", x.str()));
  return spatial;
}

// Fills pads and column sizes from the image sizes, kernel, strides and dilations (Conv, pools).
void resolve_columns(ConvGeometry& g, const SpatialAttrs& a, bool ceil_mode, const char* op) {
  const int s = g.spatial;
  if (a.auto_pad == AutoPad::NotSet) {
    OT_CHECK(a.pads.empty() || static_cast<int>(a.pads.size()) == 2 * s, op, ": attribute pads ", join(a.pads),
             " must have 2 values per spatial axis (", 2 * s, ")");
    for (int i = 0; i < s; ++i) {
      const int64_t b = a.pads.empty() ? 0 : a.pads[static_cast<size_t>(i)];
      const int64_t e = a.pads.empty() ? 0 : a.pads[static_cast<size_t>(i + s)];
      OT_CHECK(b >= 0 && e >= 0, op, ": attribute pads ", join(a.pads), " must not be negative");
      g.pad_begin[slot(s, i)] = b;
      g.pad_end[slot(s, i)] = e;
    }
  }
  for (int i = slot(s, 0); i < kMaxSpatial; ++i) {
    // Attributes come from the model: a hostile one must get an error, not a wrapped size.
    const int64_t extent = checked_add(checked_mul(g.kernel[i] - 1, g.dilation[i], op), 1, op);
    if (a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower) {
      g.out[i] = ceil_div(g.in[i], g.stride[i]);
      const int64_t total = std::max<int64_t>(
          0, checked_sub(checked_add(checked_mul(g.out[i] - 1, g.stride[i], op), extent, op), g.in[i], op));
      g.pad_begin[i] = a.auto_pad == AutoPad::SameUpper ? total / 2 : total - total / 2;
      g.pad_end[i] = total - g.pad_begin[i];
      continue;
    }
    const int64_t span = checked_sub(checked_add(checked_add(g.in[i], g.pad_begin[i], op), g.pad_end[i], op), extent, op);
    OT_CHECK(span >= 0, op, ": spatial axis ", i - slot(s, 0), " has size ", g.in[i], " with pads ", g.pad_begin[i],
             "+", g.pad_end[i], ", smaller than the kernel extent ", extent);
    g.out[i] = (ceil_mode ? ceil_div(span, g.stride[i]) : span / g.stride[i]) + 1;
    // As PyTorch and ONNX Runtime do: ceil_mode never starts a window inside the end padding.
    if (ceil_mode && (g.out[i] - 1) * g.stride[i] >= g.in[i] + g.pad_begin[i]) --g.out[i];  // both < span
  }
}

void check_channels(int64_t channels, int64_t group, const char* what, const TensorShape& x, const TensorShape& w) {
  OT_CHECK(channels % group == 0, what, " channels (", channels, ") are not divisible by group ", group, " (X ",
           x.str(), ", W ", w.str(), ")");
}

void take_kernel(ConvGeometry& g, const SpatialAttrs& a, const TensorShape& w, const char* op) {
  const int s = g.spatial;
  OT_CHECK(w.rank() == s + 2, op, ": W ", w.str(), " must have rank ", s + 2, " like X");
  for (int i = 0; i < s; ++i) g.kernel[slot(s, i)] = w[i + 2];
  if (!a.kernel_shape.empty()) {
    OT_CHECK(static_cast<int>(a.kernel_shape.size()) == s, op, ": attribute kernel_shape ", join(a.kernel_shape),
             " must have ", s, " values");
    for (int i = 0; i < s; ++i)
      OT_CHECK(a.kernel_shape[static_cast<size_t>(i)] == w[i + 2], op, ": attribute kernel_shape ",
               join(a.kernel_shape), " does not match W ", w.str());
  }
  put(g.stride, a.strides, s, 1, 1, "strides");
  put(g.dilation, a.dilations, s, 1, 1, "dilations");
}

}  // namespace

SpatialAttrs::SpatialAttrs(const Node& node)
    : auto_pad(parse_auto_pad(node.attr_string("auto_pad", "NOTSET"))),
      kernel_shape(node.attr_ints("kernel_shape")),
      strides(node.attr_ints("strides")),
      pads(node.attr_ints("pads")),
      dilations(node.attr_ints("dilations")),
      output_padding(node.attr_ints("output_padding")),
      output_shape(node.attr_ints("output_shape")),
      group(node.attr_int("group", 1)),
      ceil_mode(node.attr_int("ceil_mode", 0) != 0) {
  OT_CHECK(group >= 1, "attribute group is ", group, ", it must be at least 1");
}

TensorShape ConvGeometry::image_shape() const {
  TensorShape s{batch, image_channels};
  for (int i = slot(spatial, 0); i < kMaxSpatial; ++i) s.push_back(in[i]);
  return s;
}

TensorShape ConvGeometry::col_shape() const {
  TensorShape s{batch, col_channels};
  for (int i = slot(spatial, 0); i < kMaxSpatial; ++i) s.push_back(out[i]);
  return s;
}

TensorShape ConvGeometry::weight_shape() const {
  TensorShape s{col_channels, image_channels / group};
  for (int i = slot(spatial, 0); i < kMaxSpatial; ++i) s.push_back(kernel[i]);
  return s;
}

bool ConvGeometry::is_pointwise() const {
  for (int i = 0; i < kMaxSpatial; ++i)
    if (kernel[i] != 1 || stride[i] != 1 || pad_begin[i] != 0 || in[i] != out[i]) return false;
  return true;
}

ConvGeometry conv_geometry(const SpatialAttrs& a, const TensorShape& x, const TensorShape& w) {
  ConvGeometry g;
  g.spatial = spatial_rank(x, "Conv");
  g.batch = x[0];
  g.image_channels = x[1];
  g.group = a.group;
  take_kernel(g, a, w, "Conv");
  g.col_channels = w[0];
  check_channels(g.image_channels, g.group, "Conv: input", x, w);
  check_channels(g.col_channels, g.group, "Conv: output", x, w);
  OT_CHECK(w[1] * g.group == g.image_channels, "Conv: W ", w.str(), " expects ", w[1] * g.group,
           " input channels with group ", g.group, ", X ", x.str(), " has ", g.image_channels);
  for (int i = 0; i < g.spatial; ++i) g.in[slot(g.spatial, i)] = x[i + 2];
  resolve_columns(g, a, false, "Conv");
  return g;
}

ConvGeometry conv_transpose_geometry(const SpatialAttrs& a, const TensorShape& x, const TensorShape& w) {
  ConvGeometry g;
  g.spatial = spatial_rank(x, "ConvTranspose");
  const int s = g.spatial;
  g.batch = x[0];
  g.col_channels = x[1];
  g.group = a.group;
  take_kernel(g, a, w, "ConvTranspose");
  OT_CHECK(w[0] == g.col_channels, "ConvTranspose: W ", w.str(), " must have X's ", g.col_channels,
           " channels in its first dim (X ", x.str(), ")");
  check_channels(g.col_channels, g.group, "ConvTranspose: input", x, w);
  g.image_channels = w[1] * g.group;
  std::array<int64_t, kMaxSpatial> adj{0, 0, 0};
  put(adj, a.output_padding, s, 0, 0, "output_padding");
  std::vector<int64_t> target = a.output_shape;
  if (static_cast<int>(target.size()) == s + 2) target.erase(target.begin(), target.begin() + 2);  // [N, C, ...]
  OT_CHECK(target.empty() || static_cast<int>(target.size()) == s, "ConvTranspose: attribute output_shape ",
           join(a.output_shape), " must have ", s, " values");
  const bool same = a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower;
  if (a.auto_pad == AutoPad::NotSet && target.empty())
    OT_CHECK(a.pads.empty() || static_cast<int>(a.pads.size()) == 2 * s, "ConvTranspose: attribute pads ",
             join(a.pads), " must have 2 values per spatial axis (", 2 * s, ")");
  for (int i = 0; i < s; ++i) {
    const int k = slot(s, i);
    g.out[k] = x[i + 2];
    OT_CHECK(adj[k] < g.stride[k] || adj[k] < g.dilation[k], "ConvTranspose: output_padding ", adj[k],
             " on axis ", i, " must be smaller than the stride or the dilation");
    const char* op = "ConvTranspose";
    const int64_t natural =
        checked_add(checked_add(checked_mul(g.stride[k], g.out[k] - 1, op), adj[k], op),
                    checked_add(checked_mul(g.kernel[k] - 1, g.dilation[k], op), 1, op), op);
    if (!target.empty() || same) {
      g.in[k] = target.empty() ? checked_mul(g.out[k], g.stride[k], op) : target[static_cast<size_t>(i)];
      // ONNX's split of the total padding: the odd one at the end for SAME_UPPER, at the start
      // otherwise. An output larger than the natural size gets no negative padding: its tail is
      // left at zero (plus bias), as ONNX Runtime does.
      const int64_t total = std::max<int64_t>(0, natural - g.in[k]);
      g.pad_begin[k] = a.auto_pad == AutoPad::SameUpper ? total / 2 : total - total / 2;
      g.pad_end[k] = total - g.pad_begin[k];
    } else {
      if (a.auto_pad == AutoPad::NotSet && !a.pads.empty()) {
        g.pad_begin[k] = a.pads[static_cast<size_t>(i)];
        g.pad_end[k] = a.pads[static_cast<size_t>(i + s)];
        OT_CHECK(g.pad_begin[k] >= 0 && g.pad_end[k] >= 0, "ConvTranspose: attribute pads ", join(a.pads),
                 " must not be negative");
      }
      g.in[k] = checked_sub(checked_sub(natural, g.pad_begin[k], op), g.pad_end[k], op);
    }
    OT_CHECK(g.in[k] >= 1, "ConvTranspose: output axis ", i, " would have size ", g.in[k], " (X ", x.str(),
             ", W ", w.str(), ")");
  }
  return g;
}

ConvGeometry pool_geometry(const SpatialAttrs& a, const TensorShape& x, const char* op) {
  ConvGeometry g;
  g.spatial = spatial_rank(x, op);
  const int s = g.spatial;
  g.batch = x[0];
  g.image_channels = g.col_channels = x[1];
  OT_CHECK(static_cast<int>(a.kernel_shape.size()) == s, op, ": attribute kernel_shape ", join(a.kernel_shape),
           " must have one value per spatial axis of X ", x.str());
  put(g.kernel, a.kernel_shape, s, 1, 1, "kernel_shape");
  put(g.stride, a.strides, s, 1, 1, "strides");
  put(g.dilation, a.dilations, s, 1, 1, "dilations");
  for (int i = 0; i < s; ++i) g.in[slot(s, i)] = x[i + 2];
  resolve_columns(g, a, a.ceil_mode, op);
  return g;
}

void check_same_dtype(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  OT_CHECK(a.dtype() == b.dtype(), a_name, " ", a.str(), " and ", b_name, " ", b.str(),
           " have different element types");
}

TensorShape shape_input(const KernelContext& ctx, int i, const char* name) {
  const Tensor& t = ctx.input(i);
  OT_CHECK(t.rank() == 1 && t.dtype() == DType::Int64, "input ", i, " (", name, ") must be a 1-D int64 shape, got ",
           t.str());
  return TensorShape(t.to_int64_vector());
}

TapRange tap_range(const ConvGeometry& g, int axis, int64_t o) {
  const int64_t start = o * g.stride[axis] - g.pad_begin[axis], k = g.kernel[axis], d = g.dilation[axis];
  TapRange r;
  r.lo = std::min(k, start >= 0 ? 0 : ceil_div(-start, d));
  r.hi = std::max(r.lo, std::min(k, floor_div(g.in[axis] - 1 - start, d) + 1));
  r.hi_pad = std::max<int64_t>(0, std::min(k, floor_div(g.in[axis] + g.pad_end[axis] - 1 - start, d) + 1));
  return r;
}

size_t pool_taps_bytes(const ConvGeometry& g) {
  return static_cast<size_t>(g.out[0] + g.out[1] + g.out[2] + g.kernel[2]) * sizeof(TapRange);
}

PoolTaps pool_taps(const ConvGeometry& g, void* memory) {
  auto* r = static_cast<TapRange*>(memory);
  PoolTaps taps;
  for (int a = 0; a < kMaxSpatial; ++a) {
    taps.axis[a] = r;
    for (int64_t o = 0; o < g.out[a]; ++o) *r++ = tap_range(g, a, o);
  }
  taps.w_cols = r;
  for (int64_t kw = 0; kw < g.kernel[2]; ++kw, ++r) {
    // Positions ow with 0 <= ow * stride + off < in.
    const int64_t off = kw * g.dilation[2] - g.pad_begin[2], s = g.stride[2];
    r->lo = std::min(g.out[2], off >= 0 ? 0 : ceil_div(-off, s));
    r->hi = std::max(r->lo, std::min(g.out[2], g.in[2] - 1 - off < 0 ? 0 : floor_div(g.in[2] - 1 - off, s) + 1));
    r->hi_pad = r->hi;
  }
  return taps;
}

TensorShape global_pool_shape(const TensorShape& x, const char* op) {
  OT_CHECK(x.rank() >= 2, op, ": X must be [N, C, ...], got ", x.str());
  TensorShape y = x;
  for (int d = 2; d < y.rank(); ++d) y[d] = 1;
  return y;
}

}  // namespace onnxtrain
