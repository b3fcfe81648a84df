#pragma once
// torch's hardtanh (relu6 = hardtanh(0, 6)) and its gradient, over a float, a double or an 8-lane
// fast::VF alike. Shared by the HardTanh kernels and the fused elementwise kernel, so both
// give the same bits. Written as comparisons and selects, not min/max: NaN fails every
// comparison, so it passes through the forward and gets gradient 0, as torch's vectorized
// kernels give it.
#include "ops/math/fast_math.h"

namespace onnxtrain::hard_tanh_math {

template <typename V>
V forward(V x, fast::lane_t<V> lo, fast::lane_t<V> hi) {
  const V low = x < lo ? fast::broadcast<V>(lo) : x;
  return x > hi ? fast::broadcast<V>(hi) : low;
}
template <typename V>
V grad(V dy, V x, fast::lane_t<V> lo, fast::lane_t<V> hi) {
  return ((x > lo) & (x < hi)) ? dy : V{};
}

}  // namespace onnxtrain::hard_tanh_math
