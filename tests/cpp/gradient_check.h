#pragma once
// Finite-difference checks of gradient rules. A case is one node with concrete inputs; the check
// builds its training graph with the real gradient builder and executor, and compares every
// input gradient to central differences of L = sum(r * output) for fixed random r.
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace onnxtrain::testing {

struct GradCase {
  std::string name;      // unique, a valid gtest name part
  std::string op_type;
  std::string domain;
  AttributeMap attrs;
  std::vector<Tensor> inputs;       // an undefined tensor is an omitted optional input
  std::vector<bool> differentiable;  // per input; default: every floating input
  int num_outputs = 1;
  int opset = 17;
  // Tolerances: float64 cases use the defaults; float32 cases must state theirs.
  double eps = 1e-6, rtol = 1e-5, atol = 1e-7;
};

std::vector<GradCase>& grad_cases();
bool add_grad_cases(std::vector<GradCase> cases);

// Random tensors; with min_abs > 0 values stay at least that far from 0 (away from kinks).
Tensor random_tensor(DType dtype, const TensorShape& shape, uint64_t seed, double lo = -1, double hi = 1,
                     double min_abs = 0);
Tensor int64_tensor(const std::vector<int64_t>& values, const TensorShape& shape);
Tensor int64_tensor(const std::vector<int64_t>& values);  // 1-D

// Runs the check; returns "" on success or a description of the worst mismatch.
std::string check_gradient(const GradCase& c);

}  // namespace onnxtrain::testing

#define OT_GRAD_CASES(...)                                                             \
  static const bool OT_CONCAT(ot_grad_cases_, __COUNTER__) =                          \
      ::onnxtrain::testing::add_grad_cases(__VA_ARGS__)

namespace onnxtrain::testing {
// gtest prints a parameter with this instead of its bytes.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }
}  // namespace onnxtrain::testing
