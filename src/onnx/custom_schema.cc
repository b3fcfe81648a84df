#include "onnx/custom_schema.h"

#include <onnx/defs/shape_inference.h>

namespace onnxtrain {

bool register_onnxtrain_schema(onnx::OpSchema schema) {
  OT_CHECK(schema.domain() == kOnnxTrainDomain, "schema ", schema.Name(), " is not in domain ", kOnnxTrainDomain);
  auto& domains = onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
  if (!domains.Map().count(kOnnxTrainDomain)) domains.AddDomainToVersion(kOnnxTrainDomain, 1, 1);
  onnx::RegisterSchema(std::move(schema));
  return true;
}

onnx::OpSchema elementwise_float_schema(const char* name, const char* doc) {
  onnx::OpSchema schema;
  schema.SetName(name)
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc(doc)
      .Input(0, "X", "input", "T")
      .Output(0, "Y", "output", "T")
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "float types")
      .TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

namespace {

// CheckpointBegin and CheckpointEnd: the boundary markers the front end (onnxtrain/_checkpoint.py)
// puts around a torch.utils.checkpoint segment's inputs and outputs. Output i is input i. The
// sessions remove them before anything else runs (passes/checkpoint_segments.cc), so they have no
// kernel; the schema keeps types flowing through them until then.
onnx::OpSchema checkpoint_boundary_schema(const char* name, const char* doc) {
  onnx::OpSchema schema;
  schema.SetName(name)
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc(doc)
      .Attr("segment", "which checkpointed segment the marker bounds (unique in the graph)", onnx::AttributeProto::INT)
      .Input(0, "inputs", "the values crossing the boundary", "T", onnx::OpSchema::Variadic, false)
      .Output(0, "outputs", "the same values", "T", onnx::OpSchema::Variadic, false)
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor type")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        for (size_t i = 0; i < ctx.getNumInputs() && i < ctx.getNumOutputs(); ++i) {
          if (!ctx.getInputType(i)) continue;
          onnx::propagateElemTypeFromInputToOutput(ctx, i, i);
          if (onnx::hasInputShape(ctx, i)) onnx::propagateShapeFromInputToOutput(ctx, i, i);
        }
      });
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(checkpoint_boundary_schema("CheckpointBegin", "The inputs of a torch.utils.checkpoint segment."));
ONNXTRAIN_SCHEMA(checkpoint_boundary_schema("CheckpointEnd", "The outputs of a torch.utils.checkpoint segment."));

}  // namespace onnxtrain
