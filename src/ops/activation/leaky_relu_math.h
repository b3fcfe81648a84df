#pragma once
// LeakyRelu and its gradient over a float, a double or an 8-lane fast::VF alike, shared by the
// LeakyRelu kernels and the fused elementwise kernel so that fusing does not change a bit.
#include "ops/math/fast_math.h"

namespace onnxtrain::leaky_relu_math {

template <typename V>
V forward(V x, fast::lane_t<V> alpha) {
  return x >= fast::lane_t<V>(0) ? x : alpha * x;
}
// v is Y when alpha > 0, else X: its sign tells the branch either way (x == 0 takes alpha).
template <typename V>
V grad(V dy, V v, fast::lane_t<V> alpha) {
  return v > fast::lane_t<V>(0) ? dy : alpha * dy;
}

}  // namespace onnxtrain::leaky_relu_math
