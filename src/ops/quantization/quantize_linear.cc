// QuantizeLinear, DequantizeLinear (opsets 10 and 13: per tensor, or per channel of `axis`) and
// DynamicQuantizeLinear (opset 11: uint8 with scale and zero point from x's range).
//   QuantizeLinear:   y = saturate(round(x / scale) + zero_point), to uint8 (default) or int8
//   DequantizeLinear: y = (x - zero_point) * scale, from uint8, int8 or int32, to float32
// Rounding is to nearest with ties to even. The division is done in float32 for float32 x, as
// ONNX's reference does, so that values on a rounding tie land where the reference puts them.
#include <algorithm>
#include <atomic>

#include "opdef/op_registry.h"
#include "ops/quantization/quantize_common.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

constexpr int64_t kGrain = 1 << 14;

template <typename Q, typename X, typename Div>
void quantize_into(ThreadPool& pool, const X* x, int64_t n, const QuantChannels& q, Q* y, Div divide,
                   const char* op) {
  std::atomic<bool> nan_seen{false};
  pool.parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    bool bad = false;
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = q.channel_of(i);
      y[i] = round_and_saturate<Q>(divide(x[i], q.scale[static_cast<size_t>(c)]), q.zero_point[static_cast<size_t>(c)], bad);
    }
    if (bad) nan_seen.store(true, std::memory_order_relaxed);
  });
  OT_CHECK(!nan_seen.load(), op, ": x holds NaN, which has no quantized value");
}

class QuantizeLinearKernel final : public Kernel {
 public:
  explicit QuantizeLinearKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    const DType out = zp ? zp->dtype() : DType::UInt8;
    OT_CHECK(out == DType::UInt8 || out == DType::Int8, "QuantizeLinear: the zero point has element type ",
             dtype_name(out), "; uint8 or int8 expected");
    const QuantChannels q = quant_channels(x.shape(), ctx.input(1), zp, axis_, "QuantizeLinear");
    Tensor& y = ctx.allocate_output(0, out, x.shape());
    auto run = [&](auto qtag) {
      using Q = typename decltype(qtag)::type;
      if (x.dtype() == DType::Float32)
        quantize_into(ctx.threads(), x.data<float>(), x.numel(), q, y.data<Q>(), [](float v, float s) { return v / s; },
                      "QuantizeLinear");
      else if (x.dtype() == DType::Int32)
        quantize_into(ctx.threads(), x.data<int32_t>(), x.numel(), q, y.data<Q>(),
                      [](int32_t v, float s) { return static_cast<double>(v) / s; }, "QuantizeLinear");
      else
        OT_THROW("QuantizeLinear: x has element type ", dtype_name(x.dtype()), "; float32 or int32 expected");
    };
    if (out == DType::UInt8) run(TypeTag<uint8_t>{});
    else run(TypeTag<int8_t>{});
  }

 private:
  int64_t axis_;
};

class DequantizeLinearKernel final : public Kernel {
 public:
  explicit DequantizeLinearKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (zp)
      OT_CHECK(zp->dtype() == x.dtype(), "DequantizeLinear: the zero point has element type ", dtype_name(zp->dtype()),
               ", x has ", dtype_name(x.dtype()), "; they must match");
    const QuantChannels q = quant_channels(x.shape(), ctx.input(1), zp, axis_, "DequantizeLinear");
    if (x.dtype() == DType::Int32)
      for (int32_t z : q.zero_point)
        OT_CHECK(z == 0, "DequantizeLinear: an int32 x takes no zero point but 0, got ", z);
    Tensor& y = ctx.allocate_output(0, DType::Float32, x.shape());
    float* py = y.data<float>();
    auto run = [&](auto tag) {
      using X = typename decltype(tag)::type;
      const X* px = x.data<X>();
      ctx.threads().parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const auto c = static_cast<size_t>(q.channel_of(i));
          py[i] = static_cast<float>(static_cast<int64_t>(px[i]) - q.zero_point[c]) * q.scale[c];
        }
      });
    };
    switch (x.dtype()) {
      case DType::UInt8: run(TypeTag<uint8_t>{}); break;
      case DType::Int8: run(TypeTag<int8_t>{}); break;
      case DType::Int32: run(TypeTag<int32_t>{}); break;
      default: OT_THROW("DequantizeLinear: x has element type ", dtype_name(x.dtype()), "; uint8, int8 or int32 expected");
    }
  }

 private:
  int64_t axis_;
};

// The range is widened to include 0 so that 0 is exactly representable; an all-zero x has no
// range at all and quantizes to zeros with scale 0 and zero point 0.
void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  OT_CHECK(x.dtype() == DType::Float32, "DynamicQuantizeLinear: x has element type ", dtype_name(x.dtype()),
           "; float32 expected");
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    OT_CHECK(!std::isnan(px[i]), "DynamicQuantizeLinear: x holds NaN at element ", i, ", which has no quantized value");
    lo = std::min(lo, px[i]);
    hi = std::max(hi, px[i]);
  }
  OT_CHECK(std::isfinite(lo) && std::isfinite(hi), "DynamicQuantizeLinear: x holds an infinity, so its range has no scale");
  const float scale = (hi - lo) / 255.0f;
  bool bad = false;
  const uint8_t zero_point = scale == 0 ? 0 : round_and_saturate<uint8_t>(0.0f - lo / scale, 0, bad);
  Tensor& y = ctx.allocate_output(0, DType::UInt8, x.shape());
  uint8_t* py = y.data<uint8_t>();
  if (scale == 0) std::fill(py, py + n, uint8_t(0));
  else
    for (int64_t i = 0; i < n; ++i) py[i] = round_and_saturate<uint8_t>(px[i] / scale, zero_point, bad);
  if (ctx.output_needed(1)) ctx.allocate_output(1, DType::Float32, {}).data<float>()[0] = scale;
  if (ctx.output_needed(2)) ctx.allocate_output(2, DType::UInt8, {}).data<uint8_t>()[0] = zero_point;
}

}  // namespace

ONNXTRAIN_KERNEL("", "QuantizeLinear", kernel_factory<QuantizeLinearKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "DequantizeLinear", kernel_factory<DequantizeLinearKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "DynamicQuantizeLinear", kernel_factory(&dynamic_quantize_linear),
                 Recompute::Costly, Rounding::PerValue);
#define OT_QUANTIZATION_REFUSAL                                                                        \
  "its integer output stands for a float that a gradient needs, and onnxtrain has no gradient through " \
  "quantization (fake quantization / quantization-aware training is not supported)"
ONNXTRAIN_GRADIENT_REFUSED("", "QuantizeLinear", OT_QUANTIZATION_REFUSAL);
ONNXTRAIN_GRADIENT_REFUSED("", "DynamicQuantizeLinear", OT_QUANTIZATION_REFUSAL);

}  // namespace onnxtrain
