// Dropout (opsets 7-13) and ai.onnxtrain::DropoutGrad, which its gradient rule uses.
//
// The training-mode mask comes from the counter-based generator (ops/common/counter_rng.h):
// element i is kept iff bits(key, i) < threshold, the key derived from ctx.random_seed() (and the
// `seed` attribute when given).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autodiff/grad_builder.h"
#include "core/half.h"
#include "opdef/op_registry.h"
#include "ops/common/counter_rng.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

struct MaskKey {
  rng::Key key;
  uint64_t threshold;  // keep iff bits < threshold; 2^32 keeps everything
};

// Keep probability threshold / 2^32 is within 2^-33 of 1 - ratio.
MaskKey mask_key(uint64_t seed, double ratio) {
  return {rng::key_of(seed), static_cast<uint64_t>(std::llround((1.0 - ratio) * 4294967296.0))};
}

// y = x * (keep ? scale : 0) and mask = keep for n elements from element `first` of a block
// keyed (k0, k1); x, y and mask point at element `first`. Multiplying (rather than selecting 0)
// propagates NaN from dropped elements, as PyTorch does.
template <typename T, bool kWriteMask>
void dropout_range(const T* x, T* y, bool* mask, int64_t first, int64_t n, uint32_t k0, uint32_t k1,
                   uint64_t threshold, T scale) {
  if (threshold >= (uint64_t{1} << 32)) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    if (kWriteMask) std::memset(mask, 1, static_cast<size_t>(n));
    return;
  }
  const uint32_t thr = static_cast<uint32_t>(threshold);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng::bits(static_cast<uint32_t>(first + i), k0, k1) < thr;
    y[i] = x[i] * (keep ? scale : T(0));
    if (kWriteMask) mask[i] = keep;
  }
}

// Elements [b, e) of one aligned block, stored as S. 16-bit values go through float32 tiles, so
// that the generator's loop stays the vectorized float32 one; each product is rounded once.
template <typename S, bool kWriteMask>
void dropout_block(const S* x, S* y, bool* mask, int64_t b, int64_t e, const MaskKey& key,
                   ComputeType<S> scale) {
  const rng::Key k = rng::block_key(key.key, b);
  if constexpr (!kIs16BitFloat<S>) {
    dropout_range<S, kWriteMask>(x + b, y + b, kWriteMask ? mask + b : nullptr, b, e - b, k.k0, k.k1, key.threshold,
                                 scale);
  } else {
    constexpr int64_t kTile = 256;
    float in[kTile], out[kTile];
    for (int64_t t = b; t < e; t += kTile) {
      const int64_t n = std::min(kTile, e - t);
      for (int64_t i = 0; i < n; ++i) in[i] = widened_from(x[t + i]);
      dropout_range<float, kWriteMask>(in, out, kWriteMask ? mask + t : nullptr, t, n, k.k0, k.k1, key.threshold,
                                       scale);
      for (int64_t i = 0; i < n; ++i) y[t + i] = rounded_to<S>(out[i]);
    }
  }
}

// The float types Dropout and DropoutGrad take, as their storage types: 16-bit ones are read and
// written as they are (a copy to float32 and back would cost more than the multiply).
template <typename Fn>
void dispatch_stored_float(DType t, const char* what, Fn&& fn) {
  if (t == DType::BFloat16) return fn(TypeTag<BHalf>{});
  if (t == DType::Float16) return fn(TypeTag<Half>{});
  dispatch_float(t, what, std::forward<Fn>(fn));
}

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelInfo& info)
      : opset_(info.opset),
        attr_ratio_(info.node.attr_float("ratio", 0.5f)),
        has_seed_(info.node.has_attr("seed")),
        seed_(static_cast<uint64_t>(info.node.attr_int("seed", 0))) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    // Before opset 12 Dropout has no training switch: in an inference graph it is the identity.
    bool training = false;
    double ratio = opset_ < 12 ? attr_ratio_ : 0.5;
    if (opset_ >= 12) {
      if (ctx.has_input(1)) {
        OT_CHECK(ctx.input(1).numel() == 1, "ratio must be a scalar, got ", ctx.input(1).str());
        ratio = ctx.input(1).item_as_double();
      }
      if (ctx.has_input(2)) {
        const Tensor& t = ctx.input(2);
        OT_CHECK(t.dtype() == DType::Bool && t.numel() == 1, "training_mode must be a bool scalar, got ", t.str());
        training = t.data<bool>()[0];
      }
    }
    if (training) OT_CHECK(ratio >= 0 && ratio <= 1, "ratio must be in [0, 1], got ", ratio);
    const bool want_mask = ctx.output_needed(1);
    if (!training || ratio == 0) {
      ctx.alias_input(0, 0, x.shape());
      if (want_mask) {
        // Opset 7 types the mask like the data; later opsets make it bool.
        const DType mt = opset_ < 10 ? x.dtype() : DType::Bool;
        Tensor& m = ctx.allocate_output(1, mt, x.shape());
        if (mt == DType::Bool) {
          std::fill(m.data<bool>(), m.data<bool>() + m.numel(), true);
        } else {
          dispatch_stored_float(mt, "Dropout mask", [&](auto tag) {
            using M = typename decltype(tag)::type;
            std::fill(m.data<M>(), m.data<M>() + m.numel(), rounded_to<M>(ComputeType<M>(1)));
          });
        }
      }
      return;
    }
    uint64_t seed = ctx.random_seed();
    if (has_seed_) seed ^= seed_ * 0xD1B54A32D192ED03ULL;  // the attribute varies the stream, runs still differ
    const MaskKey key = mask_key(seed, ratio);
    dispatch_stored_float(x.dtype(), "Dropout", [&](auto tag) {
      using S = typename decltype(tag)::type;
      using T = ComputeType<S>;
      const T scale = ratio >= 1 ? T(0) : static_cast<T>(1.0 / (1.0 - ratio));  // PyTorch: p = 1 gives zeros
      const S* px = x.data<S>();
      S* py = ctx.allocate_output(0, x.dtype(), x.shape()).template data<S>();
      bool* pm = want_mask ? ctx.allocate_output(1, DType::Bool, x.shape()).template data<bool>() : nullptr;
      const int64_t n = x.numel();
      const int64_t blocks = (n + rng::kBlock - 1) / rng::kBlock;
      ctx.threads().parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / rng::kBlock), [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t b = blk * rng::kBlock, e = std::min(n, b + rng::kBlock);
          if (pm) dropout_block<S, true>(px, py, pm, b, e, key, scale);
          else dropout_block<S, false>(px, py, nullptr, b, e, key, scale);
        }
      });
    });
  }

 private:
  int opset_;
  float attr_ratio_;
  bool has_seed_;
  uint64_t seed_;
};

// Inputs (dY, mask[, ratio[, training_mode]]): dX = dY * (mask ? 1 / (1 - ratio) : 0) in training
// mode (the default: a mask only exists for it), dX = dY otherwise or when ratio is 0.
void dropout_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  double ratio = 0.5;
  if (ctx.has_input(2)) ratio = ctx.input(2).item_as_double();
  bool training = true;
  if (ctx.has_input(3)) {
    const Tensor& t = ctx.input(3);
    OT_CHECK(t.dtype() == DType::Bool && t.numel() == 1, "training_mode must be a bool scalar, got ", t.str());
    training = t.data<bool>()[0];
  }
  if (!training || ratio == 0) {
    ctx.alias_input(0, 0, dy.shape());
    return;
  }
  const Tensor& mask = ctx.input(1);
  OT_CHECK(mask.dtype() == DType::Bool && mask.shape() == dy.shape(), "mask ", mask.str(),
           " must be bool and shaped like dY ", dy.str());
  dispatch_stored_float(dy.dtype(), "DropoutGrad", [&](auto tag) {
    using S = typename decltype(tag)::type;
    using T = ComputeType<S>;
    const T scale = ratio >= 1 ? T(0) : static_cast<T>(1.0 / (1.0 - ratio));
    const S* g = dy.data<S>();
    // Mask bytes are 0 or 1; read as numbers, since GCC does not vectorize selects on bool loads.
    const uint8_t* m = reinterpret_cast<const uint8_t*>(mask.data<bool>());
    S* dx = ctx.allocate_output(0, dy.dtype(), dy.shape()).template data<S>();
    ctx.threads().parallel_for(dy.numel(), kParallelGrain, [g, m, dx, scale](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = rounded_to<S>(widened_from(g[i]) * (static_cast<T>(m[i]) * scale));
    });
  });
}

void dropout_gradient(GradBuilder& g) {
  const Node& n = g.node();
  // Without a training_mode input (or before opset 12) Dropout is the identity.
  if (g.opset() < 12 || !g.has_input(2)) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  if (n.outputs.size() < 2 || n.outputs[1].empty())
    throw UnsupportedError(str_cat(n.describe(), ": the gradient of a training-mode Dropout needs its mask output, "
                                                 "which this node does not produce"));
  g.set_input_grad(0, g.op("DropoutGrad", {g.output_grad(0), g.output(1), g.has_input(1) ? g.input(1) : "", g.input(2)},
                           {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "Dropout", kernel_factory<DropoutKernel>(), Recompute::Cheap, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "Dropout");
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "DropoutGrad", kernel_factory(&dropout_grad), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Dropout", dropout_gradient);
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Dropout", kBothHalfFloats);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "DropoutGrad", kBothHalfFloats);

}  // namespace onnxtrain
