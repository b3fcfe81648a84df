// Finite-difference cases for src/ops/tensor: shape-moving ops.
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> cases() {
  const DType F64 = DType::Float64;
  auto r = [&](const TensorShape& s, uint64_t seed) { return random_tensor(F64, s, seed); };
  return {
      {"Identity", "Identity", "", {}, {r({2, 3}, 1)}},
      {"Reshape_infer", "Reshape", "", {}, {r({2, 3, 4}, 2), int64_tensor({0, -1})}},
      {"Flatten_axis2", "Flatten", "", {{"axis", Attribute::of_int(2)}}, {r({2, 3, 2, 2}, 3)}},
      {"Squeeze", "Squeeze", "", {}, {r({2, 1, 3, 1}, 4), int64_tensor({1, -1})}},
      {"Unsqueeze", "Unsqueeze", "", {}, {r({2, 3}, 5), int64_tensor({0, 3})}},
      {"Transpose_perm", "Transpose", "", {{"perm", Attribute::of_ints({2, 0, 1})}}, {r({2, 3, 4}, 6)}},
      {"Transpose_default", "Transpose", "", {}, {r({2, 3, 4}, 7)}},
      {"Cast_to_float32", "Cast", "", {{"to", Attribute::of_int(1)}}, {r({3, 2}, 8)}, {}, 1, 17,
       // The forward rounds to float32, so differences see float32 steps: eps and tolerance sized for that.
       1e-3, 1e-4, 1e-5},
  };
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> broadcast_cases() {
  const DType F64 = DType::Float64;
  Tensor cond = Tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  return {
      {"Expand_rows", "Expand", "", {}, {random_tensor(F64, {3, 1}, 11), int64_tensor({2, 3, 4})}},
      {"Expand_same", "Expand", "", {}, {random_tensor(F64, {2, 3}, 12), int64_tensor({2, 3})}},
      {"Where_broadcast", "Where", "", {}, {cond, random_tensor(F64, {2, 3}, 13), random_tensor(F64, {3}, 14)}},
  };
}

OT_GRAD_CASES(broadcast_cases());

}  // namespace
}  // namespace onnxtrain::testing
