#pragma once
// Shared by the quantization kernels: scales and zero points read per tensor or per channel,
// and the rounding ONNX prescribes (to nearest, ties to even) with saturation to the 8-bit range.
//
// These are integer ops: they have no gradient rules, so the gradient builder refuses (by name)
// any request to differentiate through them.
#include <cmath>
#include <limits>
#include <vector>

#include "opdef/kernel.h"

namespace onnxtrain {

// Rounds to nearest, ties to even (the default floating-point rounding mode), and clamps into
// Q's range. NaN has no quantized value: `bad` is set and 0 returned.
template <typename Q, typename F>
Q round_and_saturate(F v, int32_t zero_point, bool& bad) {
  if (std::isnan(v)) {
    bad = true;
    return Q(0);
  }
  const double r = static_cast<double>(std::nearbyint(v)) + zero_point;
  constexpr double lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
  return static_cast<Q>(r < lo ? lo : r > hi ? hi : r);
}

// A scale and zero point per channel of `axis` (one channel for per-tensor parameters).
// Element i of x belongs to channel (i / inner) % channels.
struct QuantChannels {
  int64_t channels = 1, inner = 1;
  std::vector<float> scale;
  std::vector<int32_t> zero_point;

  int64_t channel_of(int64_t i) const { return channels == 1 ? 0 : (i / inner) % channels; }
};

// Reads scale (float32) and the optional zero point (int8, uint8 or int32) for x of shape `x`.
// Scalars and one-element vectors are per tensor; a 1-D scale of x.shape[axis] values is per
// channel. `op` names the caller in errors.
QuantChannels quant_channels(const TensorShape& x, const Tensor& scale, const Tensor* zero_point, int64_t axis,
                             const char* op);

// The values of a scalar or 1-D zero-point tensor of any integer type, widened; `expected`
// elements (1 broadcasts). Absent: zeros.
std::vector<int32_t> zero_points(const Tensor* zero_point, int64_t expected, const char* op, const char* what);

// Scale tensors of the QLinear ops: float32, `expected` values (1 broadcasts).
std::vector<float> scales(const Tensor& scale, int64_t expected, const char* op, const char* what);

}  // namespace onnxtrain
