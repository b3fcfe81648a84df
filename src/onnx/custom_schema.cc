#include "onnx/custom_schema.h"

namespace onnxtrain {

bool register_onnxtrain_schema(onnx::OpSchema schema) {
  OT_CHECK(schema.domain() == kOnnxTrainDomain, "schema ", schema.Name(), " is not in domain ", kOnnxTrainDomain);
  auto& domains = onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
  if (!domains.Map().count(kOnnxTrainDomain)) domains.AddDomainToVersion(kOnnxTrainDomain, 1, 1);
  onnx::RegisterSchema(std::move(schema));
  return true;
}

}  // namespace onnxtrain
