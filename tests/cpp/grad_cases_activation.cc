// Finite-difference cases for src/ops/activation. Inputs stay away from each function's kinks
// (0 for the rectifier family, the corners of HardSigmoid and HardSwish) so that central
// differences are exact; attribute choices cover both the output-based and the input-based
// backward forms (alpha <= 0 makes the rules read X instead of Y).
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor away_from_zero(const TensorShape& s, uint64_t seed, double range = 3) {
  return random_tensor(F64, s, seed, -range, range, 0.1);
}

AttributeMap f(std::initializer_list<std::pair<const char*, float>> kv) {
  AttributeMap m;
  for (const auto& [k, v] : kv) m[k] = Attribute::of_float(v);
  return m;
}

std::vector<GradCase> cases() {
  std::vector<GradCase> c = {
      {"Relu", "Relu", "", {}, {random_tensor(F64, {3, 4}, 1, -1, 1, 0.1)}},
      {"Sigmoid", "Sigmoid", "", {}, {random_tensor(F64, {3, 4}, 2, -4, 4)}},
      {"Tanh", "Tanh", "", {}, {random_tensor(F64, {2, 5}, 3, -3, 3)}},

      {"LeakyRelu_default", "LeakyRelu", "", {}, {away_from_zero({3, 4}, 10)}},
      {"LeakyRelu_alpha", "LeakyRelu", "", f({{"alpha", 0.3f}}), {away_from_zero({2, 1, 5}, 11)}},
      {"LeakyRelu_negative_alpha", "LeakyRelu", "", f({{"alpha", -0.5f}}), {away_from_zero({7}, 12)}},

      {"PRelu_channel_slope", "PRelu", "", {}, {away_from_zero({2, 3, 4}, 20), random_tensor(F64, {3, 1}, 21, 0.1, 0.5)}},
      {"PRelu_row_slope", "PRelu", "", {}, {away_from_zero({4, 3}, 22), random_tensor(F64, {3}, 23, -0.5, 0.5)}},
      {"PRelu_scalar_slope", "PRelu", "", {}, {away_from_zero({2, 5}, 24), random_tensor(F64, {1}, 25, 0.1, 0.5)}},
      {"PRelu_same_shape", "PRelu", "", {}, {away_from_zero({2, 3}, 26), random_tensor(F64, {2, 3}, 27, -1, 1)}},

      {"Elu_default", "Elu", "", {}, {away_from_zero({3, 4}, 30)}},
      {"Elu_alpha", "Elu", "", f({{"alpha", 2.0f}}), {away_from_zero({2, 1, 5}, 31)}},
      {"Elu_negative_alpha", "Elu", "", f({{"alpha", -0.7f}}), {away_from_zero({6}, 32)}},
      {"Selu_default", "Selu", "", {}, {away_from_zero({3, 4}, 33)}},
      {"Selu_attributes", "Selu", "", f({{"alpha", 2.0f}, {"gamma", 3.0f}}), {away_from_zero({2, 5}, 34)}},
      {"Celu_default", "Celu", "", {}, {away_from_zero({3, 4}, 35)}},
      {"Celu_alpha", "Celu", "", f({{"alpha", 3.0f}}), {away_from_zero({2, 1, 3}, 36)}},

      {"Softplus", "Softplus", "", {}, {random_tensor(F64, {3, 4}, 40, -6, 6)}},
      {"Softplus_large", "Softplus", "", {}, {random_tensor(F64, {5}, 41, 15, 30)}},
      {"Softsign", "Softsign", "", {}, {away_from_zero({3, 4}, 42, 5)}},

      // Corners at (0 - beta) / alpha and (1 - beta) / alpha: +-2.5 by default, -1.2 and 0.8 below.
      {"HardSigmoid_default", "HardSigmoid", "", {}, {random_tensor(F64, {3, 4}, 50, -4, 4)}},
      {"HardSigmoid_attributes", "HardSigmoid", "", f({{"alpha", 0.5f}, {"beta", 0.6f}}),
       {random_tensor(F64, {2, 6}, 51, -2, 2)}},
      {"HardSwish", "HardSwish", "", {}, {random_tensor(F64, {3, 5}, 52, -5, 5)}},
      // Bounds at -1 and 2: every value at least 0.05 from them.
      {"HardTanh", "HardTanh", kOnnxTrainDomain, f({{"min_val", -1.0f}, {"max_val", 2.0f}}),
       {Tensor::from_vector(std::vector<double>{-3, -1.5, -0.95, -0.2, 0.3, 1.1, 1.9, 2.05, 2.6, 4}, {2, 5})}},
      {"HardTanh_relu6", "HardTanh", kOnnxTrainDomain, f({{"min_val", 0.0f}, {"max_val", 6.0f}}),
       {Tensor::from_vector(std::vector<double>{-2, -0.1, 0.2, 3, 5.9, 6.1, 7, 1}, {8})}},
      {"Gelu_exact", "Gelu", kOnnxTrainDomain, {}, {random_tensor(F64, {3, 7}, 53, -4, 4)}},
      {"Gelu_tanh", "Gelu", kOnnxTrainDomain, {{"approximate", Attribute::of_string("tanh")}},
       {random_tensor(F64, {3, 7}, 54, -4, 4)}},
      {"Silu", "Silu", kOnnxTrainDomain, {}, {random_tensor(F64, {3, 7}, 55, -6, 6)}},
      {"Mish", "Mish", kOnnxTrainDomain, {}, {random_tensor(F64, {3, 7}, 56, -6, 6)}},
  };
  return c;
}

// The vectorized float32 activations over lengths that are not multiples of the vector width.
std::vector<GradCase> production_activation_cases() {
  std::vector<GradCase> c;
  for (const char* op : {"Sigmoid", "Tanh", "Relu", "Softplus", "HardSwish", "Elu"})
    c.push_back({std::string("Production_") + op, op, "", {}, {random_tensor(F64, {5, 1003}, 500, -8, 8)}});
  for (const char* mode : {"none", "tanh"})
    c.push_back({std::string("Production_Gelu_") + mode, "Gelu", kOnnxTrainDomain,
                 {{"approximate", Attribute::of_string(mode)}}, {random_tensor(F64, {5, 1003}, 501, -8, 8)}});
  c.push_back({"Production_Silu", "Silu", kOnnxTrainDomain, {}, {random_tensor(F64, {5, 1003}, 502, -8, 8)}});
  c.push_back({"Production_Mish", "Mish", kOnnxTrainDomain, {}, {random_tensor(F64, {5, 1003}, 503, -8, 8)}});
  return c;
}

OT_GRAD_CASES(cases());
OT_PRODUCTION_CASES(production_activation_cases());

}  // namespace
}  // namespace onnxtrain::testing
