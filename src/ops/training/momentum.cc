// Momentum (ai.onnx.preview.training, opset 1): one update of X with its momentum V, in the
// standard or Nesterov form, exactly as ONNX's pseudo code writes it:
//   G' = norm_coefficient * X + G
//   V_new = alpha * V + (T > 0 ? beta : 1) * G'
//   standard: X_new = X - R * V_new
//   nesterov: X_new = X - R * (G' + alpha * V_new)
// Inputs R, T, X..., G..., V...; outputs X_new..., V_new...
//
// With alpha = momentum, beta = 1 - dampening, norm_coefficient = weight_decay and V = 0 at
// T = 0, the standard form is torch.optim.SGD's update (whose first step sets the buffer to the
// gradient), and the Nesterov form is SGD(nesterov=True)'s.
#include <string>

#include "ops/training/optimizer_common.h"

namespace onnxtrain {
namespace {

bool nesterov_mode(const Node& node) {
  OT_CHECK(node.has_attr("mode"), node.describe(), " requires attribute 'mode' (\"standard\" or \"nesterov\")");
  const std::string mode = node.attr_string("mode", "");
  OT_CHECK(mode == "standard" || mode == "nesterov", node.describe(), ": mode '", mode,
           "' is not one of \"standard\" and \"nesterov\"");
  return mode == "nesterov";
}

class MomentumKernel final : public Kernel {
 public:
  explicit MomentumKernel(const KernelInfo& info)
      : n_(optimized_tensor_count(info.node, 3, 2, "X, G, V")),
        alpha_(required_float_attr(info.node, "alpha")),
        beta_(required_float_attr(info.node, "beta")),
        norm_coefficient_(required_float_attr(info.node, "norm_coefficient")),
        nesterov_(nesterov_mode(info.node)) {}

  void compute(KernelContext& ctx) const override {
    static const char* const names[] = {"X", "G", "V"};
    const double r = learning_rate_input(ctx, "Momentum");
    const int64_t t = update_count_input(ctx, "Momentum");
    const double beta_adjusted = t > 0 ? static_cast<double>(beta_) : 1.0;
    for (int64_t i = 0; i < n_; ++i) {
      std::vector<const Tensor*> in = block_inputs(ctx, n_, 3, i, "Momentum", names);
      dispatch_float(in[0]->dtype(), "Momentum", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = in[0]->data<T>(), *g = in[1]->data<T>(), *v = in[2]->data<T>();
        T* x_new = block_output<T>(ctx, n_, 0, i, *in[0]);
        T* v_new = block_output<T>(ctx, n_, 1, i, *in[0]);
        const T rate = static_cast<T>(r), a = static_cast<T>(alpha_), b = static_cast<T>(beta_adjusted);
        const T norm = static_cast<T>(norm_coefficient_);
        const bool nesterov = nesterov_;
        ctx.threads().parallel_for(in[0]->numel(), kParallelGrain, [&](int64_t s, int64_t e) {
          for (int64_t k = s; k < e; ++k) {
            const T g_reg = norm * x[k] + g[k];
            const T vk = a * v[k] + b * g_reg;
            if (x_new) x_new[k] = nesterov ? x[k] - rate * (g_reg + a * vk) : x[k] - rate * vk;
            if (v_new) v_new[k] = vk;
          }
        });
      });
    }
  }

 private:
  int64_t n_;
  float alpha_, beta_, norm_coefficient_;
  bool nesterov_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxPreviewTrainingDomain, "Momentum", kernel_factory<MomentumKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT_REFUSED(kOnnxPreviewTrainingDomain, "Momentum",
                           "Momentum is an optimizer update and has no gradient; nothing may be differentiated "
                           "through its outputs");

}  // namespace onnxtrain
