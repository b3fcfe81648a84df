// Slice and SliceGrad (dY written back into zeros at the sliced places). Both are one strided
// copy once the effective start and step of every axis are known.
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/tensor/indexing.h"

namespace onnxtrain {
namespace {

struct SliceSpec {
  std::vector<int64_t> start, step;  // per axis of the data
  TensorShape out;
};

// Effective starts, steps and output dims per ONNX Slice-13 (clamping differs by step sign).
SliceSpec resolve_slice(const TensorShape& shape, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                        std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int rank = shape.rank();
  OT_CHECK(starts.size() == ends.size(), "starts (", starts.size(), " values) and ends (", ends.size(),
           " values) differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  OT_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "starts, ends, axes and steps must have ",
           "the same length, got ", starts.size(), ", ", ends.size(), ", ", axes.size(), ", ", steps.size());
  SliceSpec s;
  s.start.assign(static_cast<size_t>(rank), 0);
  s.step.assign(static_cast<size_t>(rank), 1);
  s.out = shape;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int axis = normalize_axis(axes[i], rank, "Slice");
    OT_CHECK(!seen[axis], "axis ", axes[i], " appears more than once in axes");
    seen[axis] = true;
    const int64_t dim = shape[axis], step = steps[i];
    OT_CHECK(step != 0, "steps[", i, "] is 0");
    int64_t b = starts[i], e = ends[i], n = 0;
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      n = e > b ? (e - b - 1) / step + 1 : 0;
    } else if (dim > 0) {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      const int64_t mag = step == INT64_MIN ? INT64_MAX : -step;
      n = b > e ? (b - e - 1) / mag + 1 : 0;
    }
    s.start[axis] = n > 0 ? b : 0;
    s.step[axis] = step;
    s.out[axis] = n;
  }
  return s;
}

// Offset of the first sliced element and the element strides of the slice inside `shape`.
void slice_view(const TensorShape& shape, const SliceSpec& s, int64_t& offset, Strides& strides) {
  const Strides base = contiguous_strides(shape);
  offset = 0;
  for (int d = 0; d < shape.rank(); ++d) {
    offset += s.start[d] * base[d];
    strides[d] = s.step[d] * base[d];
  }
}

// starts/ends/axes/steps: inputs 1-4 since opset 10 (first_param names input 1), attributes before.
class SliceParams {
 public:
  SliceParams(const KernelInfo& info, bool attributes) : attributes_(attributes) {
    if (attributes_) {
      starts_ = info.node.attr_ints("starts");
      ends_ = info.node.attr_ints("ends");
      axes_ = info.node.attr_ints("axes");
    }
  }
  SliceSpec resolve(const KernelContext& ctx, const TensorShape& shape, int first_param) const {
    if (attributes_) return resolve_slice(shape, starts_, ends_, axes_, {});
    auto optional = [&](int i, const char* what) {
      return ctx.has_input(i) ? int_values(ctx.input(i), what) : std::vector<int64_t>{};
    };
    return resolve_slice(shape, int_values(ctx.input(first_param), "starts"),
                         int_values(ctx.input(first_param + 1), "ends"), optional(first_param + 2, "axes"),
                         optional(first_param + 3, "steps"));
  }

 private:
  bool attributes_;
  std::vector<int64_t> starts_, ends_, axes_;
};

class SliceKernel final : public Kernel {
 public:
  explicit SliceKernel(const KernelInfo& info) : params_(info, info.opset < 10) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    SliceSpec s = params_.resolve(ctx, x.shape(), 1);
    bool whole = s.out == x.shape();
    for (int d = 0; d < x.rank(); ++d) whole = whole && s.step[static_cast<size_t>(d)] == 1;
    if (whole) {  // x[:, :] and the like: a view, no copy
      ctx.alias_input(0, 0, x.shape());
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), s.out);
    int64_t offset;
    Strides strides{};
    slice_view(x.shape(), s, offset, strides);
    const size_t es = dtype_size(x.dtype());
    const auto* first = static_cast<const uint8_t*>(x.raw_data()) + offset * static_cast<int64_t>(es);
    strided_copy(ctx.threads(), es, s.out, first, strides, y.raw_data(), contiguous_strides(s.out));
  }

 private:
  SliceParams params_;
};

// SliceGrad(dY, data_shape, starts, ends, [axes], [steps]).
class SliceGradKernel final : public Kernel {
 public:
  explicit SliceGradKernel(const KernelInfo& info) : params_(info, false) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const TensorShape shape(int_values(ctx.input(1), "SliceGrad data shape"));
    SliceSpec s = params_.resolve(ctx, shape, 2);
    OT_CHECK(dy.shape() == s.out, "SliceGrad: dY ", dy.str(), " does not match the slice ", s.out.str(), " of ",
             shape.str());
    Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
    std::memset(dx.raw_data(), 0, dx.nbytes());
    int64_t offset;
    Strides strides{};
    slice_view(shape, s, offset, strides);
    const size_t es = dtype_size(dy.dtype());
    strided_copy(ctx.threads(), es, s.out, dy.raw_data(), contiguous_strides(s.out),
                 static_cast<uint8_t*>(dx.raw_data()) + offset * static_cast<int64_t>(es), strides);
  }

 private:
  SliceParams params_;
};

void slice_gradient(GradBuilder& g) {
  std::vector<std::string> inputs{g.output_grad(0), g.shape_of(g.input(0))};
  if (g.opset() < 10) {
    const Node& n = g.node();
    inputs.push_back(g.int64s(n.attr_ints("starts")));
    inputs.push_back(g.int64s(n.attr_ints("ends")));
    if (n.has_attr("axes")) inputs.push_back(g.int64s(n.attr_ints("axes")));
  } else {
    for (int i = 1; i <= 4; ++i) inputs.push_back(g.has_input(i) ? g.input(i) : "");
  }
  while (inputs.back().empty()) inputs.pop_back();
  std::string dx = g.op("SliceGrad", inputs, {}, kOnnxTrainDomain);
  same_dtype(g, dx, g.input(0));
  g.set_input_grad(0, dx);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Slice", kernel_factory<SliceKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Slice", kBothHalfFloats);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SliceGrad", kernel_factory<SliceGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Slice", slice_gradient);

}  // namespace onnxtrain
