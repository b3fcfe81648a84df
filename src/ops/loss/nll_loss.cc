// NegativeLogLikelihoodLoss (opset 12/13): loss[n, d] = -weight[c] input[n, c, d] with
// c = target[n, d], 0 where c is ignore_index; reduced by none, sum, or the weighted mean.
// Its backward kernel NegativeLogLikelihoodLossGrad scatters -weight[c] * dL/dloss into zeros.
#include <algorithm>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/loss/loss_common.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

class NllLossKernel final : public Kernel {
 public:
  explicit NllLossKernel(const KernelInfo& info) : attrs_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const LossForward f = begin_loss_forward(ctx, attrs_, "NegativeLogLikelihoodLoss");
    const Tensor& x = f.input;
    const AxisSplit& s = f.split;
    const Tensor* weight = f.weights;
    const LossLabels& labels = f.labels;
    dispatch_float(x.dtype(), "NegativeLogLikelihoodLoss", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      const T* pw = weight ? weight->data<T>() : nullptr;
      T* out = f.loss.data<T>();
      // One value per position: cheap next to the [N, C, ...] input, so sums run serially in double.
      double total = 0, weights = 0;
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t pos = o * s.inner + i, c = labels.at(pos);
          const double w = c < 0 ? 0.0 : (pw ? static_cast<double>(pw[c]) : 1.0);
          const double l = c < 0 ? 0.0 : -w * static_cast<double>(px[(o * s.n + c) * s.inner + i]);
          if (attrs_.reduction == LossReduction::None) out[pos] = static_cast<T>(l);
          total += l;
          weights += w;
        }
      if (attrs_.reduction == LossReduction::Sum) out[0] = static_cast<T>(total);
      // All positions ignored: 0 / 0 = NaN, as PyTorch 1.13 gives.
      if (attrs_.reduction == LossReduction::Mean) out[0] = static_cast<T>(total / weights);
    });
  }

 private:
  LossAttrs attrs_;
};

// Inputs: dLoss, target, shape of the input, weight (optional). Same attributes as the forward.
class NllLossGradKernel final : public Kernel {
 public:
  explicit NllLossGradKernel(const KernelInfo& info) : attrs_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const char* what = "NegativeLogLikelihoodLossGrad";
    const Tensor& dloss = ctx.input(0);
    const Tensor& target = ctx.input(1);
    const TensorShape shape(ctx.input(2).to_int64_vector());
    const AxisSplit s = loss_layout(shape, target.shape(), what);
    const Tensor* weight = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    if (weight) check_loss_weights(*weight, dloss.dtype(), s.n, what);
    OT_CHECK(dloss.shape() == loss_shape(attrs_.reduction, target.shape()), what, ": dLoss ", dloss.str(),
             " does not have the loss's shape");
    const LossLabels labels(target, attrs_.has_ignore, attrs_.ignore_index, s.n, what);
    Tensor& dx = ctx.allocate_output(0, dloss.dtype(), shape);
    dispatch_float(dloss.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pg = dloss.data<T>();
      const T* pw = weight ? weight->data<T>() : nullptr;
      T* out = dx.data<T>();
      T scale = attrs_.reduction == LossReduction::None ? T(1) : pg[0];
      if (attrs_.reduction == LossReduction::Mean)
        scale = static_cast<T>(static_cast<double>(scale) / loss_mean_denominator(labels, s.outer * s.inner, pw));
      const int64_t per_row = s.n * s.inner;
      ctx.threads().parallel_for(s.outer, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(per_row, 1)),
                                 [&](int64_t o0, int64_t o1) {
                                   std::fill(out + o0 * per_row, out + o1 * per_row, T(0));
                                   for (int64_t o = o0; o < o1; ++o)
                                     for (int64_t i = 0; i < s.inner; ++i) {
                                       const int64_t pos = o * s.inner + i, c = labels.at(pos);
                                       if (c < 0) continue;
                                       const T g = attrs_.reduction == LossReduction::None ? pg[pos] : scale;
                                       out[(o * s.n + c) * s.inner + i] = -(pw ? pw[c] : T(1)) * g;
                                     }
                                 });
    });
  }

 private:
  LossAttrs attrs_;
};

void nll_loss_gradient(GradBuilder& g) {
  if (g.needs_input_grad(2))
    throw UnsupportedError(str_cat(g.node().describe(), ": the gradient with respect to the class weights is not "
                                                        "supported (PyTorch's nll_loss does not implement it either)"));
  const LossAttrs attrs(g.node());
  std::vector<std::string> inputs{g.output_grad(0), g.input(1), g.shape_of(g.input(0))};
  if (g.has_input(2)) inputs.push_back(g.input(2));
  g.set_input_grad(0, g.op("NegativeLogLikelihoodLossGrad", inputs, attrs.attrs(), kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "NegativeLogLikelihoodLoss", kernel_factory<NllLossKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "NegativeLogLikelihoodLossGrad", kernel_factory<NllLossGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "NegativeLogLikelihoodLoss", nll_loss_gradient);

}  // namespace onnxtrain
