#pragma once
// PyTorch's GELU and its derivative, exact and tanh-approximated, as scalar templates (float64,
// and float32 where no vector form applies) and as 8-lane float32 vector forms on fast_math.h.
// Shared by the Gelu kernels and the fused elementwise kernel, so both round alike.
//   exact:  y = x Phi(x),          dy/dx = Phi(x) + x phi(x)
//   tanh:   y = x (1 + t) / 2,     t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)
//           dy/dx = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2
#include <cmath>

#include "ops/math/fast_math.h"

namespace onnxtrain::gelu_math {

inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kCubic = 0.044715;

template <typename T>
T exact(T x) {
  return x * T(0.5) * (T(1) + std::erf(x * static_cast<T>(kInvSqrt2)));
}
template <typename T>
T tanh_form(T x) {
  return T(0.5) * x * (T(1) + std::tanh(static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kCubic) * x * x * x)));
}
template <typename T>
T exact_grad(T dy, T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * static_cast<T>(kInvSqrt2)));
  return dy * (cdf + x * static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x));
}
template <typename T>
T tanh_grad(T dy, T x) {
  const T x2 = x * x;
  const T t = std::tanh(static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kCubic) * x2 * x));
  const T du = static_cast<T>(kSqrt2OverPi) * (T(1) + static_cast<T>(3 * kCubic) * x2);
  return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
}

inline fast::VF exact(fast::VF x) { return x * (0.5f + 0.5f * fast::erf(x * static_cast<float>(kInvSqrt2))); }
inline fast::VF tanh_form(fast::VF x) {
  const fast::VF t = fast::tanh(static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x * x * x));
  return 0.5f * x * (1.0f + t);
}
inline fast::VF exact_grad(fast::VF dy, fast::VF x) {
  const fast::VF cdf = 0.5f + 0.5f * fast::erf(x * static_cast<float>(kInvSqrt2));
  const fast::VF pdf = static_cast<float>(kInvSqrt2Pi) * fast::exp(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
inline fast::VF tanh_grad(fast::VF dy, fast::VF x) {
  const fast::VF x2 = x * x;
  const fast::VF t = fast::tanh(static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x2 * x));
  const fast::VF du = static_cast<float>(kSqrt2OverPi) * (1.0f + static_cast<float>(3 * kCubic) * x2);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

}  // namespace onnxtrain::gelu_math
