// Resize (opsets 10, 11, 13), the deprecated Upsample (opsets 7, 9), and ai.onnxtrain::ResizeGrad,
// which the gradient rule of Resize uses. The resampling itself is in resize_common.cc.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/nn/resize_common.h"

namespace onnxtrain {
namespace resize {

// Attribute parsing, declared in resize_common.h: ResizeGrad nodes carry the same attributes.
Options parse_options(const Node& node, bool legacy) {
  Options o;
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest") o.mode = Mode::Nearest;
  else if (mode == "linear" || (legacy && (mode == "bilinear" || mode == "trilinear"))) o.mode = Mode::Linear;
  else if (mode == "cubic" && !legacy) o.mode = Mode::Cubic;
  else OT_THROW("mode '", mode, "' is not one of nearest, linear", legacy ? "" : ", cubic");
  if (legacy) {
    o.coord = Coord::Asymmetric;
    o.rounding = Rounding::Floor;
    return o;
  }
  const std::string ctm = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm == "half_pixel") o.coord = Coord::HalfPixel;
  else if (ctm == "pytorch_half_pixel") o.coord = Coord::PytorchHalfPixel;
  else if (ctm == "align_corners") o.coord = Coord::AlignCorners;
  else if (ctm == "asymmetric") o.coord = Coord::Asymmetric;
  else if (ctm == "tf_half_pixel_for_nn") o.coord = Coord::TfHalfPixelForNn;
  else if (ctm == "tf_crop_and_resize") o.coord = Coord::TfCropAndResize;
  else OT_THROW("coordinate_transformation_mode '", ctm, "' is unknown");
  const std::string nm = node.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor") o.rounding = Rounding::RoundPreferFloor;
  else if (nm == "round_prefer_ceil") o.rounding = Rounding::RoundPreferCeil;
  else if (nm == "floor") o.rounding = Rounding::Floor;
  else if (nm == "ceil") o.rounding = Rounding::Ceil;
  else OT_THROW("nearest_mode '", nm, "' is unknown");
  o.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  o.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  o.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  return o;
}

AttributeMap options_to_attrs(const Options& o) {
  static const char* modes[] = {"nearest", "linear", "cubic"};
  static const char* coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                 "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  static const char* roundings[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  return {{"mode", Attribute::of_string(modes[static_cast<int>(o.mode)])},
          {"coordinate_transformation_mode", Attribute::of_string(coords[static_cast<int>(o.coord)])},
          {"nearest_mode", Attribute::of_string(roundings[static_cast<int>(o.rounding)])},
          {"cubic_coeff_a", Attribute::of_float(static_cast<float>(o.cubic_a))},
          {"exclude_outside", Attribute::of_int(o.exclude_outside)},
          {"extrapolation_value", Attribute::of_float(static_cast<float>(o.extrapolation))}};
}

}  // namespace resize

namespace {

// Empty tensors stand for omitted scales/sizes/roi (opset 11 requires the inputs but lets them be empty).
std::vector<double> optional_doubles(const KernelContext& ctx, int i) {
  return ctx.has_input(i) ? resize::read_doubles(ctx.input(i)) : std::vector<double>{};
}

template <typename T>
void run_forward(KernelContext& ctx, const resize::Options& o, const resize::Geometry& g) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), g.out);
  void* scratch = ctx.scratch(resize::scratch_bytes(o, g, sizeof(T)));
  resize::forward<T>(ctx.threads(), o, g, x.data<T>(), y.data<T>(), scratch);
}

class ResizeKernel final : public Kernel {
 public:
  ResizeKernel(const KernelInfo& info, bool upsample)
      : legacy_(upsample || info.opset < 11), options_(resize::parse_options(info.node, legacy_)) {
    if (upsample && info.opset < 9) {
      for (float s : info.node.attr_floats("scales")) attr_scales_.push_back(s);
      OT_CHECK(!attr_scales_.empty(), "Upsample before opset 9 needs the scales attribute");
    }
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<double> roi, scales;
    std::vector<int64_t> sizes;
    if (!attr_scales_.empty()) {
      scales = attr_scales_;
    } else if (legacy_) {
      scales = resize::read_doubles(ctx.input(1));
    } else {
      roi = optional_doubles(ctx, 1);
      scales = optional_doubles(ctx, 2);
      if (ctx.has_input(3)) sizes = ctx.input(3).to_int64_vector();
    }
    const resize::Geometry g = resize::make_geometry(options_, x.shape(), scales, sizes, roi);
    dispatch_float(x.dtype(), "Resize", [&](auto tag) { run_forward<typename decltype(tag)::type>(ctx, options_, g); });
  }

 private:
  bool legacy_;
  resize::Options options_;
  std::vector<double> attr_scales_;
};

// Inputs (dY, shape of X, roi?, scales?) with Resize 11+ attributes -> dX. Without scales the
// scale of each axis is dY's size over X's, as when the forward was given sizes.
class ResizeGradKernel final : public Kernel {
 public:
  explicit ResizeGradKernel(const KernelInfo& info) : options_(resize::parse_options(info.node, false)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const TensorShape in(ctx.input(1).to_int64_vector());
    OT_CHECK(in.rank() == dy.rank(), "the shape of X ", in.str(), " and dY ", dy.str(), " differ in rank");
    std::vector<double> roi = optional_doubles(ctx, 2), scales = optional_doubles(ctx, 3);
    std::vector<int64_t> sizes;
    if (scales.empty()) sizes = dy.shape().to_vector();
    const resize::Geometry g = resize::make_geometry(options_, in, scales, sizes, roi);
    OT_CHECK(g.out == dy.shape(), "dY ", dy.str(), " is not the shape Resize produces from ", in.str(), ": ",
             g.out.str());
    dispatch_float(dy.dtype(), "ResizeGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& dx = ctx.allocate_output(0, dy.dtype(), in);
      void* scratch = ctx.scratch(resize::scratch_bytes(options_, g, sizeof(T)));
      resize::backward<T>(ctx.threads(), options_, g, dy.data<T>(), dx.data<T>(), scratch);
    });
  }

 private:
  resize::Options options_;
};

// Resize is linear in X for every mode, so dX is the transposed resampling of dY.
void resize_gradient(GradBuilder& g) {
  const bool legacy = g.opset() < 11;
  const resize::Options o = resize::parse_options(g.node(), legacy);
  std::vector<std::string> inputs{g.output_grad(0), g.shape_of(g.input(0))};
  if (legacy) {
    inputs.push_back("");
    inputs.push_back(g.input(1));
  } else {
    inputs.push_back(g.has_input(1) ? g.input(1) : "");
    inputs.push_back(g.has_input(2) ? g.input(2) : "");
  }
  g.set_input_grad(0, g.op("ResizeGrad", inputs, resize::options_to_attrs(o), kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Resize", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<ResizeKernel>(info, false);
}, Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Upsample", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<ResizeKernel>(info, true);
}, Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ResizeGrad", kernel_factory<ResizeGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Resize", resize_gradient);

}  // namespace onnxtrain
