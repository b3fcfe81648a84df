// Finite-difference cases for src/ops/random: PyTorch differentiates its random draws as constant
// zero. The draws are fixed by the run's seed, so away from the thresholds they do not move.
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> cases() {
  return {{"Bernoulli_probabilities", "Bernoulli", "", {}, {random_tensor(DType::Float64, {4, 5}, 1, 0.2, 0.8)}}};
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing
