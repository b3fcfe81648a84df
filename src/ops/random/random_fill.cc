// RandomUniform, RandomNormal and their *Like forms (opset 1): tensors of independent draws from
// the engine's counter-based generator (random_common.h). torch.rand/randn/rand_like/randn_like
// and torch.normal export to them. The *Like forms read only their input's shape (and, without a
// dtype attribute, its element type): PyTorch's draws carry no gradient, so these ops are
// constants to autodiff, and a gradient reaches x in x + noise through the Add alone.
#include <algorithm>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/random/random_common.h"

namespace onnxtrain {
namespace {

enum class Distribution { Uniform, Normal };

class RandomFillKernel final : public Kernel {
 public:
  RandomFillKernel(const KernelInfo& info, Distribution dist, bool like)
      : dist_(dist), like_(like), seed_(rng::seed_attr(info.node)) {
    const char* op = info.node.op_type.c_str();
    if (info.node.has_attr("dtype")) dtype_ = dtype_from_onnx(static_cast<int32_t>(info.node.attr_int("dtype", 1)));
    else if (!like) dtype_ = DType::Float32;
    if (dist == Distribution::Uniform) {
      a_ = info.node.attr_float("low", 0.0f);
      b_ = info.node.attr_float("high", 1.0f);
      OT_CHECK(a_ <= b_, op, ": low ", a_, " exceeds high ", b_);
    } else {
      a_ = info.node.attr_float("mean", 0.0f);
      b_ = info.node.attr_float("scale", 1.0f);
    }
    if (!like) {
      OT_CHECK(info.node.has_attr("shape"), op, " needs its 'shape' attribute");
      shape_ = TensorShape(info.node.attr_ints("shape"));
      shape_.numel();  // refuses negative or overflowing dims now, not at the first run
    }
  }

  void compute(KernelContext& ctx) const override {
    const TensorShape shape = like_ ? ctx.input(0).shape() : shape_;
    const DType dtype = dtype_ == DType::Undefined ? ctx.input(0).dtype() : dtype_;
    Tensor& y = ctx.allocate_output(0, dtype, shape);
    const rng::Key key = rng::run_key(ctx, seed_);
    const int64_t n = shape.numel();
    rng::dispatch_random_float(dtype, dist_ == Distribution::Uniform ? "RandomUniform" : "RandomNormal",
                               [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = y.data<T>();
      const double a = a_, b = b_;
      ctx.threads().parallel_for(n, kParallelGrain / 8, [&](int64_t s, int64_t e) {
        if (dist_ == Distribution::Uniform) {
          for (int64_t i = s; i < e; ++i) py[i] = rng::store<T>(a + (b - a) * rng::unit_for<T>(rng::draw(key, i)));
        } else {
          for (int64_t i = s; i < e; ++i) py[i] = rng::store<T>(a + b * rng::normal(key, i));
        }
      });
    });
  }

 private:
  Distribution dist_;
  bool like_;
  rng::SeedAttr seed_;
  DType dtype_ = DType::Undefined;
  double a_ = 0, b_ = 1;
  TensorShape shape_;
};

template <Distribution D, bool Like>
KernelFactory random_fill() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<RandomFillKernel>(info, D, Like);
  };
}

}  // namespace

ONNXTRAIN_KERNEL("", "RandomUniform", (random_fill<Distribution::Uniform, false>()),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "RandomUniform");
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "RandomUniform", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "RandomNormal", (random_fill<Distribution::Normal, false>()),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "RandomNormal");
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "RandomNormal", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "RandomUniformLike", (random_fill<Distribution::Uniform, true>()),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "RandomUniformLike");
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "RandomUniformLike", kBothHalfFloats);
ONNXTRAIN_KERNEL("", "RandomNormalLike", (random_fill<Distribution::Normal, true>()),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "RandomNormalLike");
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "RandomNormalLike", kBothHalfFloats);
ONNXTRAIN_NOT_DIFFERENTIABLE("", "RandomUniformLike");
ONNXTRAIN_NOT_DIFFERENTIABLE("", "RandomNormalLike");

}  // namespace onnxtrain
