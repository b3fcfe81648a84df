#include "onnx/op_schema.h"

#include <onnx/defs/schema.h>

namespace onnxtrain {

Differentiability input_differentiability(const std::string& domain, const std::string& op_type,
                                          int opset, int index) {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op_type, opset, domain);
  if (!schema) return Differentiability::Unknown;
  const auto& formals = schema->inputs();
  if (formals.empty()) return Differentiability::Unknown;
  size_t i = std::min<size_t>(static_cast<size_t>(index), formals.size() - 1);
  const auto& formal = formals[i];
  // Past the last formal only a variadic formal can match.
  if (static_cast<size_t>(index) >= formals.size() &&
      formal.GetOption() != onnx::OpSchema::FormalParameterOption::Variadic)
    return Differentiability::NonDifferentiable;
  switch (formal.GetDifferentiationCategory()) {
    case onnx::OpSchema::Differentiable: return Differentiability::Differentiable;
    case onnx::OpSchema::NonDifferentiable: return Differentiability::NonDifferentiable;
    default: return Differentiability::Unknown;
  }
}

bool onnx_defines_op(const std::string& domain, const std::string& op_type, int opset) {
  return onnx::OpSchemaRegistry::Schema(op_type, opset, domain) != nullptr;
}

}  // namespace onnxtrain
