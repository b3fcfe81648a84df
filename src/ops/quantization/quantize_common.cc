#include "ops/quantization/quantize_common.h"

namespace onnxtrain {

std::vector<int32_t> zero_points(const Tensor* zero_point, int64_t expected, const char* op, const char* what) {
  if (!zero_point) return std::vector<int32_t>(static_cast<size_t>(expected), 0);
  OT_CHECK(zero_point->rank() <= 1, op, ": ", what, " ", zero_point->str(), " must be a scalar or 1-D");
  const int64_t n = zero_point->numel();
  OT_CHECK(n == 1 || n == expected, op, ": ", what, " ", zero_point->str(), " must hold 1 or ", expected, " values");
  const DType dt = zero_point->dtype();
  OT_CHECK(dt == DType::UInt8 || dt == DType::Int8 || dt == DType::Int32, op, ": ", what, " has element type ",
           dtype_name(dt), "; uint8, int8 or int32 expected");
  std::vector<int32_t> out(static_cast<size_t>(expected));
  for (int64_t i = 0; i < expected; ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(zero_point->item_as_int(n == 1 ? 0 : i));
  return out;
}

std::vector<float> scales(const Tensor& scale, int64_t expected, const char* op, const char* what) {
  OT_CHECK(scale.dtype() == DType::Float32, op, ": ", what, " has element type ", dtype_name(scale.dtype()),
           "; float32 expected");
  OT_CHECK(scale.rank() <= 1, op, ": ", what, " ", scale.str(), " must be a scalar or 1-D");
  const int64_t n = scale.numel();
  OT_CHECK(n == 1 || n == expected, op, ": ", what, " ", scale.str(), " must hold 1 or ", expected, " values");
  std::vector<float> out(static_cast<size_t>(expected));
  for (int64_t i = 0; i < expected; ++i) out[static_cast<size_t>(i)] = scale.data<float>()[n == 1 ? 0 : i];
  return out;
}

QuantChannels quant_channels(const TensorShape& x, const Tensor& scale, const Tensor* zero_point, int64_t axis,
                             const char* op) {
  QuantChannels q;
  OT_CHECK(scale.rank() <= 1, op, ": the scale ", scale.str(), " must be a scalar or 1-D");
  if (zero_point)
    OT_CHECK(zero_point->shape() == scale.shape(), op, ": the zero point ", zero_point->str(),
             " must have the scale's shape ", scale.shape().str());
  if (scale.numel() != 1) {
    const int a = normalize_axis(axis, x.rank(), op);
    OT_CHECK(scale.numel() == x[a], op, ": the per-axis scale ", scale.str(), " must hold x's ", x[a],
             " values along axis ", axis, " (x ", x.str(), ")");
    q.channels = x[a];
    q.inner = x.size_between(a + 1, x.rank());
  }
  q.scale = scales(scale, q.channels, op, "the scale");
  q.zero_point = zero_points(zero_point, q.channels, op, "the zero point");
  return q;
}

}  // namespace onnxtrain
