// Finite-difference cases for src/ops/activation.
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> cases() {
  const DType F64 = DType::Float64;
  return {
      // Inputs stay 0.1 away from Relu's kink so central differences are exact.
      {"Relu", "Relu", "", {}, {random_tensor(F64, {3, 4}, 1, -1, 1, 0.1)}},
      {"Sigmoid", "Sigmoid", "", {}, {random_tensor(F64, {3, 4}, 2, -4, 4)}},
      {"Tanh", "Tanh", "", {}, {random_tensor(F64, {2, 5}, 3, -3, 3)}},
  };
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing
