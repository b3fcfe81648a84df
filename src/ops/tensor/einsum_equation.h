#pragma once
// Einsum equations: parsing, and the per-call resolution of labels against operand shapes that
// Einsum and EinsumGrad share (src/ops/tensor/einsum.cc).
#include <string>
#include <vector>

#include "core/shape.h"

namespace onnxtrain {

// Label ids: 'A'-'Z' are 0-25 and 'a'-'z' 26-51, so that implicit outputs sort as numpy and
// torch sort them (uppercase first); ellipsis dim e is 52 + e.
inline constexpr int kEinsumLetters = 52;

struct EinsumEquation {
  std::vector<std::string> terms;  // input terms, spaces removed
  std::string output;              // the output term, derived when the equation is implicit
};

EinsumEquation parse_einsum_equation(std::string equation);

// The equation resolved against operand shapes.
struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // label per input dim
  std::vector<int> output;               // label per output dim
  TensorShape out_shape;
  std::vector<int64_t> size;  // per label: its size where > 1 in some input, else 1
  std::vector<bool> kept;     // per label: an output dim the operands vary along
};

// `ref`: EinsumGrad's output shape, whose term may repeat labels and hold labels no operand
// has; null for Einsum, whose output shape follows from the inputs.
EinsumSpec make_einsum_spec(const EinsumEquation& eq, const std::vector<TensorShape>& shapes, const TensorShape* ref);

}  // namespace onnxtrain
