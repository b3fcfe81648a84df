// Bernoulli (opset 15): y_i = 1 with probability p_i, drawn from the engine's counter-based
// generator keyed by the run's seed (which ORTModule draws from torch's RNG, as for Dropout).
// torchvision's stochastic depth reaches it through the front end's bernoulli_ symbolic.
// PyTorch differentiates bernoulli as constant zero, so its gradient is zeros.
#include <cmath>

#include "opdef/op_registry.h"
#include "ops/common/counter_rng.h"
#include "ops/common/elementwise.h"

namespace onnxtrain {
namespace {

class BernoulliKernel final : public Kernel {
 public:
  explicit BernoulliKernel(const KernelInfo& info)
      : has_seed_(info.node.has_attr("seed")),
        seed_(info.node.attr_float("seed", 0.0f)),
        dtype_(info.node.has_attr("dtype") ? static_cast<DType>(info.node.attr_int("dtype", 0)) : DType::Undefined) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& p = ctx.input(0);
    const DType out_dtype = dtype_ == DType::Undefined ? p.dtype() : dtype_;
    Tensor& y = ctx.allocate_output(0, out_dtype, p.shape());
    uint64_t seed = ctx.random_seed();
    if (has_seed_) seed ^= static_cast<uint64_t>(std::llround(static_cast<double>(seed_))) * 0xD1B54A32D192ED03ULL;
    const rng::Key key = rng::key_of(seed);
    const int64_t n = p.numel();
    dispatch_float(p.dtype(), "Bernoulli", [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      const P* pp = p.data<P>();
      dispatch_all(out_dtype, "Bernoulli output", [&](auto ytag) {
        using Y = typename decltype(ytag)::type;
        Y* py = y.data<Y>();
        const int64_t blocks = (n + rng::kBlock - 1) / rng::kBlock;
        ctx.threads().parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / rng::kBlock), [&](int64_t b0, int64_t b1) {
          for (int64_t blk = b0; blk < b1; ++blk) {
            const int64_t b = blk * rng::kBlock, e = std::min(n, b + rng::kBlock);
            const rng::Key k = rng::block_key(key, b);
            for (int64_t i = b; i < e; ++i) {
              const double prob = static_cast<double>(pp[i]);
              OT_CHECK(prob >= 0 && prob <= 1, "probability ", prob, " at element ", i, " is outside [0, 1]");
              py[i] = static_cast<Y>(rng::unit(rng::bits(static_cast<uint32_t>(i), k.k0, k.k1)) < prob ? 1 : 0);
            }
          }
        });
      });
    });
  }

 private:
  bool has_seed_;
  float seed_;
  DType dtype_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Bernoulli", kernel_factory<BernoulliKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "Bernoulli");
ONNXTRAIN_ZERO_GRADIENT("", "Bernoulli");

}  // namespace onnxtrain
