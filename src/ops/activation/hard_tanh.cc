// ai.onnxtrain::HardTanh (torch's hardtanh, relu6 = HardTanh(0, 6)) and its gradient. ONNX's
// Clip has the same values but an inclusive gradient (1 at the bounds, clamp's), where torch's
// hardtanh gives 0 at both bounds. NaN passes through, with gradient 0 as torch's vectorized
// kernel gives it (its scalar loop, for tensors under one vector, gives dY). MobileNetV2 runs
// relu6 after most convolutions, so float32 runs hard_tanh_math.h on 8-lane vectors: the
// scalar select chain does not vectorize, and ran at a tenth of a copy's speed.
#include "ops/activation/hard_tanh_math.h"

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/fused/instruction_forms.h"
#include "ops/math/float_kernels.h"

namespace onnxtrain {
namespace {

class HardTanhKernel final : public Kernel {
 public:
  explicit HardTanhKernel(const KernelInfo& info)
      : min_(info.node.attr_float("min_val", -1.0f)), max_(info.node.attr_float("max_val", 1.0f)) {
    OT_CHECK(min_ <= max_, info.node.describe(), ": min_val ", min_, " is above max_val ", max_);
  }
  void compute(KernelContext& ctx) const override {
    const float lo = min_, hi = max_;
    float_unary_vectorized(ctx, "HardTanh", [lo, hi](auto v) {
      using T = fast::lane_t<decltype(v)>;
      return hard_tanh_math::forward(v, static_cast<T>(lo), static_cast<T>(hi));
    });
  }

 private:
  float min_, max_;
};

// HardTanhGrad(dY, X): dY where min_val < x < max_val, else 0 (NaN included), as torch's
// vectorized hardtanh_backward.
class HardTanhGradKernel final : public Kernel {
 public:
  explicit HardTanhGradKernel(const KernelInfo& info)
      : min_(info.node.attr_float("min_val", -1.0f)), max_(info.node.attr_float("max_val", 1.0f)) {}
  void compute(KernelContext& ctx) const override {
    const float lo = min_, hi = max_;
    float_binary_vectorized(ctx, "HardTanhGrad", [lo, hi](auto g, auto v) {
      using T = fast::lane_t<decltype(g)>;
      return hard_tanh_math::grad(g, v, static_cast<T>(lo), static_cast<T>(hi));
    });
  }

 private:
  float min_, max_;
};

void hard_tanh_gradient(GradBuilder& g) {
  const Node& n = g.node();
  g.set_input_grad(0, g.op("HardTanhGrad", {g.output_grad(0), g.input(0)},
                           {{"min_val", Attribute::of_float(n.attr_float("min_val", -1.0f))},
                            {"max_val", Attribute::of_float(n.attr_float("max_val", 1.0f))}},
                           kOnnxTrainDomain));
}

onnx::OpSchema hard_tanh_schema() {
  onnx::OpSchema schema;
  schema.SetName("HardTanh")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("Y = min(max(X, min_val), max_val), NaN kept; the gradient is 0 at both bounds (torch's hardtanh).")
      .Attr("min_val", "lower bound", onnx::AttributeProto::FLOAT, -1.0f)
      .Attr("max_val", "upper bound", onnx::AttributeProto::FLOAT, 1.0f)
      .Input(0, "X", "input", "T")
      .Output(0, "Y", "X clamped", "T")
      .TypeConstraint("T", {"tensor(float16)", "tensor(bfloat16)", "tensor(float)", "tensor(double)"},
                      "floating-point tensors")
      .TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

// In a fused loop (FusedElementwise): the bounds are the instruction's two immediates.
struct HardTanhForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T x, float lo, float hi) { return hard_tanh_math::forward(x, T(lo), T(hi)); }
  static fast::VF vector(fast::VF x, float lo, float hi) { return hard_tanh_math::forward(x, lo, hi); }
};
struct HardTanhGradForms {
  static constexpr bool kVector = true;
  template <typename T>
  static T scalar(T dy, T x, float lo, float hi) { return hard_tanh_math::grad(dy, x, T(lo), T(hi)); }
  static fast::VF vector(fast::VF dy, fast::VF x, float lo, float hi) { return hard_tanh_math::grad(dy, x, lo, hi); }
};
const ElementwiseInstruction kHardTanh = fused::unary_instruction<HardTanhForms>("HardTanh");
const ElementwiseInstruction kHardTanhGrad = fused::binary_instruction<HardTanhGradForms>("HardTanhGrad");

// HardTanh (one input) or HardTanhGrad (two); bounds out of order are left to the standalone
// kernel, whose error names the node.
template <size_t Inputs>
bool lower_hard_tanh(const Node& node, LoweredInstruction& out) {
  const float lo = node.attr_float("min_val", -1.0f), hi = node.attr_float("max_val", 1.0f);
  if (node.inputs.size() != Inputs || !(lo <= hi)) return false;
  out = {Inputs == 1 ? &kHardTanh : &kHardTanhGrad, lo, hi};
  return true;
}

}  // namespace

ONNXTRAIN_SCHEMA(hard_tanh_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "HardTanh", kernel_factory<HardTanhKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "HardTanhGrad", kernel_factory<HardTanhGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "HardTanh", hard_tanh_gradient);

ONNXTRAIN_INSTRUCTION(kHardTanh);
ONNXTRAIN_INSTRUCTION(kHardTanhGrad);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "HardTanh", lower_hard_tanh<1>);
ONNXTRAIN_ELEMENTWISE(kOnnxTrainDomain, "HardTanhGrad", lower_hard_tanh<2>);

}  // namespace onnxtrain
