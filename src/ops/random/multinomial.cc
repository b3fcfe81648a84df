// Multinomial (opset 7): sample_size class indices per row of unnormalized log-probabilities,
// with replacement, drawn by inverting each row's cumulative distribution (in double) with the
// engine's counter-based generator. torch.multinomial(p, n, replacement=True) exports as
// Multinomial(Log(p)); without replacement the front end writes a top-k of perturbed
// probabilities instead (see _symbolics.py). Indices carry no gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/random/random_common.h"

namespace onnxtrain {
namespace {

class MultinomialKernel final : public Kernel {
 public:
  explicit MultinomialKernel(const KernelInfo& info)
      : seed_(rng::seed_attr(info.node)),
        samples_(info.node.attr_int("sample_size", 1)),
        dtype_(dtype_from_onnx(static_cast<int32_t>(info.node.attr_int("dtype", 6)))) {
    OT_CHECK(samples_ >= 0, "Multinomial: sample_size ", samples_, " is negative");
    OT_CHECK(dtype_ == DType::Int32 || dtype_ == DType::Int64, "Multinomial: dtype must be int32 or int64, got ",
             dtype_name(dtype_));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() == 2, "Multinomial: input ", x.str(), " must be [batch_size, class_size]");
    const int64_t rows = x.dim(0), classes = x.dim(1);
    Tensor& y = ctx.allocate_output(0, dtype_, TensorShape({rows, samples_}));
    if (rows == 0 || samples_ == 0) return;
    OT_CHECK(classes > 0, "Multinomial: input ", x.str(), " has no classes to draw from");
    const rng::Key key = rng::run_key(ctx, seed_);
    rng::dispatch_random_float(x.dtype(), "Multinomial", [&](auto xtag) {
      using T = typename decltype(xtag)::type;
      const T* px = x.data<T>();
      dispatch_numeric(dtype_, "Multinomial output", [&](auto ytag) {
        using Y = typename decltype(ytag)::type;
        Y* py = y.data<Y>();
        const int64_t grain = std::max<int64_t>(1, kParallelGrain / (classes + samples_));
        ctx.threads().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
          std::vector<double> cdf(static_cast<size_t>(classes));
          for (int64_t r = r0; r < r1; ++r) sample_row(px + r * classes, classes, r, key, cdf, py + r * samples_);
        });
      });
    });
  }

 private:
  template <typename T, typename Y>
  void sample_row(const T* logits, int64_t classes, int64_t row, const rng::Key& key, std::vector<double>& cdf,
                  Y* out) const {
    double top = -INFINITY;
    for (int64_t j = 0; j < classes; ++j) {
      const double v = rng::load(logits[j]);
      OT_CHECK(!std::isnan(v) && v != INFINITY, "Multinomial: row ", row, " has a log-probability of ", v);
      top = std::max(top, v);
    }
    OT_CHECK(top != -INFINITY, "Multinomial: row ", row, " has no class of positive probability");
    double total = 0;
    int64_t last_positive = 0;
    for (int64_t j = 0; j < classes; ++j) {
      const double p = std::exp(rng::load(logits[j]) - top);
      if (p > 0) last_positive = j;
      total += p;
      cdf[static_cast<size_t>(j)] = total;
    }
    for (int64_t s = 0; s < samples_; ++s) {
      const double u = rng::unit(rng::draw(key, row * samples_ + s)) * total;
      const int64_t j = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      out[s] = static_cast<Y>(std::min(j, last_positive));  // u rounding up to `total` lands on the last class
    }
  }

  rng::SeedAttr seed_;
  int64_t samples_;
  DType dtype_;
};

}  // namespace

ONNXTRAIN_KERNEL("", "Multinomial", kernel_factory<MultinomialKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_RANDOM_DRAW("", "Multinomial");
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Multinomial", kBothHalfFloats);

}  // namespace onnxtrain
