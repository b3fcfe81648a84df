// Adam (ai.onnx.preview.training, opset 1): one update of X with its exponentially averaged
// gradient V and squared gradient H, exactly as ONNX's pseudo code writes it:
//   G' = norm_coefficient * X + G
//   V_new = alpha * V + (1 - alpha) * G'
//   H_new = beta * H + (1 - beta) * G' * G'
//   R' = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R
//   X_new = (1 - norm_coefficient_post) * (X - R' * V_new / (sqrt(H_new) + epsilon))
// Inputs R, T, X..., G..., V..., H...; outputs X_new..., V_new..., H_new...
// Note that epsilon is added after the square root and that the bias correction lives in R',
// unlike torch.optim.Adam, which divides V_new and H_new by their corrections separately.
#include <cmath>

#include "ops/training/optimizer_common.h"

namespace onnxtrain {
namespace {

class AdamKernel final : public Kernel {
 public:
  explicit AdamKernel(const KernelInfo& info)
      : n_(optimized_tensor_count(info.node, 4, 3, "X, G, V, H")),
        alpha_(info.node.attr_float("alpha", 0.9f)),
        beta_(info.node.attr_float("beta", 0.999f)),
        epsilon_(info.node.attr_float("epsilon", 1e-6f)),
        norm_coefficient_(info.node.attr_float("norm_coefficient", 0.0f)),
        norm_coefficient_post_(info.node.attr_float("norm_coefficient_post", 0.0f)) {}

  void compute(KernelContext& ctx) const override {
    static const char* const names[] = {"X", "G", "V", "H"};
    const double r = learning_rate_input(ctx, "Adam");
    const int64_t t = update_count_input(ctx, "Adam");
    const double alpha = alpha_, beta = beta_;
    const double r_adjusted =
        t > 0 ? r * std::sqrt(1 - std::pow(beta, static_cast<double>(t))) / (1 - std::pow(alpha, static_cast<double>(t)))
              : r;
    for (int64_t i = 0; i < n_; ++i) {
      std::vector<const Tensor*> in = block_inputs(ctx, n_, 4, i, "Adam", names);
      dispatch_float(in[0]->dtype(), "Adam", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = in[0]->data<T>(), *g = in[1]->data<T>(), *v = in[2]->data<T>(), *h = in[3]->data<T>();
        T* x_new = block_output<T>(ctx, n_, 0, i, *in[0]);
        T* v_new = block_output<T>(ctx, n_, 1, i, *in[0]);
        T* h_new = block_output<T>(ctx, n_, 2, i, *in[0]);
        const T a = static_cast<T>(alpha), one_minus_a = static_cast<T>(1 - alpha);
        const T b = static_cast<T>(beta), one_minus_b = static_cast<T>(1 - beta);
        const T eps = static_cast<T>(epsilon_), norm = static_cast<T>(norm_coefficient_);
        const T rate = static_cast<T>(r_adjusted), keep = static_cast<T>(1.0 - norm_coefficient_post_);
        ctx.threads().parallel_for(in[0]->numel(), kParallelGrain, [&](int64_t s, int64_t e) {
          for (int64_t k = s; k < e; ++k) {
            const T g_reg = norm * x[k] + g[k];
            const T vk = a * v[k] + one_minus_a * g_reg;
            const T hk = b * h[k] + one_minus_b * (g_reg * g_reg);
            const T h_sqrt = std::sqrt(hk) + eps;
            if (x_new) x_new[k] = keep * (x[k] - rate * (vk / h_sqrt));
            if (v_new) v_new[k] = vk;
            if (h_new) h_new[k] = hk;
          }
        });
      });
    }
  }

 private:
  int64_t n_;
  float alpha_, beta_, epsilon_, norm_coefficient_, norm_coefficient_post_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxPreviewTrainingDomain, "Adam", kernel_factory<AdamKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT_REFUSED(kOnnxPreviewTrainingDomain, "Adam",
                           "Adam is an optimizer update and has no gradient; nothing may be differentiated "
                           "through its outputs");

}  // namespace onnxtrain
