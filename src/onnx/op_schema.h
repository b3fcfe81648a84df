#pragma once
// Questions answered from ONNX's own operator schemas.
#include <string>

namespace onnxtrain {

enum class Differentiability { Differentiable, NonDifferentiable, Unknown };

// Whether input `index` of op (domain, op_type) at `opset` is differentiable per the ONNX schema.
// Unknown for ops ONNX does not define (custom domains) and for variadic inputs.
Differentiability input_differentiability(const std::string& domain, const std::string& op_type,
                                          int opset, int index);

// True when ONNX defines the op at this opset.
bool onnx_defines_op(const std::string& domain, const std::string& op_type, int opset);

}  // namespace onnxtrain
