// Adagrad (ai.onnx.preview.training, opset 1): one update of X with its accumulated squared
// gradient H, exactly as ONNX's pseudo code writes it:
//   r = R / (1 + T * decay_factor)
//   G' = norm_coefficient * X + G
//   H_new = H + G' * G'
//   X_new = X - r * G' / (sqrt(H_new) + epsilon)
// Inputs R, T, X..., G..., H...; outputs X_new..., H_new...
#include <cmath>

#include "ops/training/optimizer_common.h"

namespace onnxtrain {
namespace {

class AdagradKernel final : public Kernel {
 public:
  explicit AdagradKernel(const KernelInfo& info)
      : n_(optimized_tensor_count(info.node, 3, 2, "X, G, H")),
        decay_factor_(info.node.attr_float("decay_factor", 0.0f)),
        epsilon_(info.node.attr_float("epsilon", 1e-6f)),
        norm_coefficient_(info.node.attr_float("norm_coefficient", 0.0f)) {}

  void compute(KernelContext& ctx) const override {
    static const char* const names[] = {"X", "G", "H"};
    const double r = learning_rate_input(ctx, "Adagrad");
    const int64_t t = update_count_input(ctx, "Adagrad");
    const double rate = r / (1 + static_cast<double>(t) * decay_factor_);
    for (int64_t i = 0; i < n_; ++i) {
      std::vector<const Tensor*> in = block_inputs(ctx, n_, 3, i, "Adagrad", names);
      dispatch_float(in[0]->dtype(), "Adagrad", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = in[0]->data<T>(), *g = in[1]->data<T>(), *h = in[2]->data<T>();
        T* x_new = block_output<T>(ctx, n_, 0, i, *in[0]);
        T* h_new = block_output<T>(ctx, n_, 1, i, *in[0]);
        const T r_t = static_cast<T>(rate), eps = static_cast<T>(epsilon_), norm = static_cast<T>(norm_coefficient_);
        ctx.threads().parallel_for(in[0]->numel(), kParallelGrain, [&](int64_t s, int64_t e) {
          for (int64_t k = s; k < e; ++k) {
            const T g_reg = norm * x[k] + g[k];
            const T hk = h[k] + g_reg * g_reg;
            if (x_new) x_new[k] = x[k] - r_t * g_reg / (std::sqrt(hk) + eps);
            if (h_new) h_new[k] = hk;
          }
        });
      });
    }
  }

 private:
  int64_t n_;
  float decay_factor_, epsilon_, norm_coefficient_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxPreviewTrainingDomain, "Adagrad", kernel_factory<AdagradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT_REFUSED(kOnnxPreviewTrainingDomain, "Adagrad",
                           "Adagrad is an optimizer update and has no gradient; nothing may be differentiated "
                           "through its outputs");

}  // namespace onnxtrain
