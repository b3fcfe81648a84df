#pragma once
// PyTorch's SiLU (swish) and its derivative, as scalar templates (float64, and float32 where no
// vector form applies) and as 8-lane float32 vector forms on fast_math.h. Shared by the Silu
// kernels and the fused elementwise kernel, so both round alike.
//   y = x s,  s = sigmoid(x),  dy/dx = s (1 + x (1 - s))
// Like eager's, the derivative is NaN at x = +-inf (0 * inf), and so is y at -inf.
#include <cmath>

#include "ops/math/fast_math.h"

namespace onnxtrain::silu_math {

template <typename T>
T sigmoid(T x) {
  // Split by sign so that exp never overflows.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}
template <typename T>
T forward(T x) {
  return x * sigmoid(x);
}
template <typename T>
T grad(T dy, T x) {
  const T s = sigmoid(x);
  return dy * (s * (T(1) + x * (T(1) - s)));
}

inline fast::VF forward(fast::VF x) { return x * fast::sigmoid(x); }
inline fast::VF grad(fast::VF dy, fast::VF x) {
  const fast::VF s = fast::sigmoid(x);
  return dy * (s * (1.0f + x * (1.0f - s)));
}

}  // namespace onnxtrain::silu_math
