#pragma once
// torch's hardtanh (relu6 = hardtanh(0, 6)) and its gradient, as scalar templates and as 8-lane
// float32 vector forms. Shared by the HardTanh kernels and the fused elementwise kernel, so both
// give the same bits. Written as comparisons and selects, not min/max: NaN fails every
// comparison, so it passes through the forward and gets gradient 0, as torch's vectorized
// kernels give it.
#include "ops/math/fast_math.h"

namespace onnxtrain::hard_tanh_math {

template <typename T>
T forward(T x, T lo, T hi) {
  return x < lo ? lo : x > hi ? hi : x;
}
template <typename T>
T grad(T dy, T x, T lo, T hi) {
  return x > lo && x < hi ? dy : T(0);
}

inline fast::VF forward(fast::VF x, float lo, float hi) {
  const fast::VF low = x < lo ? fast::splat(lo) : x;
  return x > hi ? fast::splat(hi) : low;
}
inline fast::VF grad(fast::VF dy, fast::VF x, float lo, float hi) {
  return ((x > lo) & (x < hi)) ? dy : fast::splat(0.0f);
}

}  // namespace onnxtrain::hard_tanh_math
