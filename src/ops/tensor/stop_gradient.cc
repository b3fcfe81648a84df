// ai.onnxtrain::StopGradient: Y is X, and no gradient flows from Y to X. It is what torch's
// x.detach() exports as: ONNX has no such op, and an Identity in its place would let the engine
// differentiate through a value the user's code cut off from autograd.
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

void stop_gradient(KernelContext& ctx) { ctx.alias_input(0, 0, ctx.input(0).shape()); }

onnx::OpSchema stop_gradient_schema() {
  onnx::OpSchema schema;
  schema.SetName("StopGradient")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("Y = X, with no gradient from Y to X (torch's detach).")
      .Input(0, "X", "any tensor", "T")
      .Output(0, "Y", "X itself", "T")
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor type")
      .TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(stop_gradient_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "StopGradient", kernel_factory(&stop_gradient),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NOT_DIFFERENTIABLE(kOnnxTrainDomain, "StopGradient");

}  // namespace onnxtrain
