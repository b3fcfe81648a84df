#pragma once
// Finite-difference checks of gradient rules. A case is one node with concrete inputs; the check
// builds its training graph with the real gradient builder and executor, and compares every
// input gradient to central differences of L = sum(r * output) for fixed random r.
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "opdef/op_registry.h"

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
  // The float32 run through the production kernels against the float64 run on the same values:
  // largest difference over the largest magnitude, per output and per gradient.
  double float32_tolerance = 2e-5;
  // Production-path cases (real-model sizes) skip finite differences: the float64 path they are
  // compared with is itself checked against finite differences on the small cases.
  bool finite_differences = true;
  // Fraction of the output weights r set to exactly 0: the sparse output gradients a ReLU or a
  // max pooling downstream produces.
  double output_weight_zeros = 0;
};

std::vector<GradCase>& grad_cases();
bool add_grad_cases(std::vector<GradCase> cases);

// Random tensors; with min_abs > 0 values stay at least that far from 0 (away from kinks).
Tensor random_tensor(DType dtype, const TensorShape& shape, uint64_t seed, double lo = -1, double hi = 1,
                     double min_abs = 0);
// max(0, random): about half exact zeros, as after a ReLU (ties in every pooling window of zeros).
Tensor post_relu_tensor(DType dtype, const TensorShape& shape, uint64_t seed);
Tensor int64_tensor(const std::vector<int64_t>& values, const TensorShape& shape);
Tensor int64_tensor(const std::vector<int64_t>& values);  // 1-D

// Runs the check; returns "" on success or a description of the worst mismatch.
std::string check_gradient(const GradCase& c);

// Runs the case in float32 (oneDNN convolutions and GEMMs, SIMD pooling, fast-math activations)
// and in float64 on the same float32-representable values, with `threads` pool threads, and
// compares outputs and gradients; "" on success.
std::string check_float32_against_float64(const GradCase& c, int threads);

// Cases at real-model sizes and with real-model data (post-ReLU zeros, ties) for the float32
// comparison only.
std::vector<GradCase>& production_cases();
bool add_production_cases(std::vector<GradCase> cases);

}  // namespace onnxtrain::testing

#define OT_GRAD_CASES(...)                                                             \
  static const bool OT_CONCAT(ot_grad_cases_, __COUNTER__) =                          \
      ::onnxtrain::testing::add_grad_cases(__VA_ARGS__)
#define OT_PRODUCTION_CASES(...)                                                       \
  static const bool OT_CONCAT(ot_production_cases_, __COUNTER__) =                    \
      ::onnxtrain::testing::add_production_cases(__VA_ARGS__)

namespace onnxtrain::testing {
// gtest prints a parameter with this instead of its bytes.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }
}  // namespace onnxtrain::testing
