// Gemm: Y = alpha op(A) op(B) + beta C, C broadcast to [M, N]; and its gradient.
#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "runtime/blas.h"
#include "runtime/half_convert.h"

namespace onnxtrain {
namespace {

class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : trans_a_(info.node.attr_int("transA", 0) != 0),
        trans_b_(info.node.attr_int("transB", 0) != 0),
        alpha_(info.node.attr_float("alpha", 1.0f)),
        beta_(info.node.attr_float("beta", 1.0f)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    OT_CHECK(a.rank() == 2 && b.rank() == 2, "A and B must be 2-D, got ", a.str(), " and ", b.str());
    OT_CHECK(a.dtype() == b.dtype(), "A and B have different element types: ", a.str(), " and ", b.str());
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0), k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0), n = trans_b_ ? b.dim(0) : b.dim(1);
    OT_CHECK(k == kb, "inner dimensions differ: A ", a.str(), (trans_a_ ? "^T" : ""), ", B ", b.str(),
             (trans_b_ ? "^T" : ""));
    Tensor& y = ctx.allocate_output(0, a.dtype(), {m, n});
    if (a.dtype() == DType::BFloat16) {
      compute_bfloat16(ctx, a, b, m, n, k, y);
      return;
    }
    dispatch_float(a.dtype(), "Gemm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = y.data<T>();
      T beta = 0;
      if (ctx.has_input(2) && beta_ != 0.0f) {
        const Tensor& c = ctx.input(2);
        OT_CHECK(c.dtype() == a.dtype(), "C has element type ", dtype_name(c.dtype()), ", A has ",
                 dtype_name(a.dtype()));
        TensorShape out_shape{m, n};
        OT_CHECK(broadcast_shapes({c.shape(), out_shape}, "Gemm") == out_shape, "C ", c.str(),
                 " does not broadcast to [", m, "x", n, "]");
        const T cb = static_cast<T>(beta_);
        binary_broadcast(ctx.threads(), c.data<T>(), c.shape(), &cb, TensorShape{}, py, out_shape,
                         [](T cv, T s) { return cv * s; });
        beta = 1;
      }
      gemm<T>(trans_a_, trans_b_, m, n, k, static_cast<T>(alpha_), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), beta,
              py, n, ctx.threads());
    });
  }

 private:
  // bfloat16 A and B (autocast's linear layers): the product accumulated in float32 on oneDNN's
  // bfloat16 GEMM (on float32 copies where the CPU has none), C added in float32, rounded once.
  void compute_bfloat16(KernelContext& ctx, const Tensor& a, const Tensor& b, int64_t m, int64_t n, int64_t k,
                        Tensor& y) const {
    Tensor y32 = Tensor::empty(DType::Float32, {m, n});
    float beta = 0;
    if (ctx.has_input(2) && beta_ != 0.0f) {
      const Tensor& c = ctx.input(2);
      OT_CHECK(c.dtype() == DType::BFloat16 || c.dtype() == DType::Float32, "C has element type ",
               dtype_name(c.dtype()), ", A has bfloat16");
      const TensorShape out_shape{m, n};
      OT_CHECK(broadcast_shapes({c.shape(), out_shape}, "Gemm") == out_shape, "C ", c.str(), " does not broadcast to [",
               m, "x", n, "]");
      const Tensor c32 = c.dtype() == DType::Float32 ? c : widened_to_float32(ctx.threads(), c);
      const float cb = beta_;
      binary_broadcast(ctx.threads(), c32.data<float>(), c32.shape(), &cb, TensorShape{}, y32.data<float>(), out_shape,
                       [](float cv, float s) { return cv * s; });
      beta = 1;
    }
    if (bfloat16_gemm_available()) {
      gemm(trans_a_, trans_b_, m, n, k, alpha_, a.data<BHalf>(), a.dim(1), b.data<BHalf>(), b.dim(1), beta,
           y32.data<float>(), n, ctx.threads());
    } else {
      const Tensor a32 = widened_to_float32(ctx.threads(), a), b32 = widened_to_float32(ctx.threads(), b);
      gemm<float>(trans_a_, trans_b_, m, n, k, alpha_, a32.data<float>(), a.dim(1), b32.data<float>(), b.dim(1), beta,
                  y32.data<float>(), n, ctx.threads());
    }
    round_into(ctx.threads(), y32.data<float>(), y);
  }

  bool trans_a_, trans_b_;
  float alpha_, beta_;
};

// With Y = alpha op(A) op(B) + beta C:
//   d op(A) = alpha dY op(B)^T,  d op(B) = alpha op(A)^T dY,  dC = beta * (dY summed to C's shape).
// Each is itself one Gemm with the right transposes, so no Transpose node is needed.
void gemm_gradient(GradBuilder& g) {
  const Node& n = g.node();
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  const std::string& dy = g.output_grad(0);
  auto gemm_node = [&](const std::string& x, const std::string& y, bool tx, bool ty) {
    return g.op("Gemm", {x, y},
                {{"transA", Attribute::of_int(tx)}, {"transB", Attribute::of_int(ty)}, {"alpha", Attribute::of_float(alpha)}});
  };
  if (g.needs_input_grad(0))
    g.set_input_grad(0, ta ? gemm_node(g.input(1), dy, tb, true) : gemm_node(dy, g.input(1), false, !tb));
  if (g.needs_input_grad(1))
    g.set_input_grad(1, tb ? gemm_node(dy, g.input(0), true, ta) : gemm_node(g.input(0), dy, !ta, false));
  if (g.needs_input_grad(2)) {
    std::string dc = g.reduce_to_input_shape(dy, 2);
    if (beta != 1.0f) dc = g.op("Mul", {dc, g.scalar_like(beta, dy)});
    g.set_input_grad(2, dc);
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "Gemm", kernel_factory<GemmKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "Gemm", gemm_gradient);
// bfloat16 on oneDNN's bfloat16 GEMM (compute_bfloat16); float16 is widened by the executor.
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "Gemm", {DType::BFloat16});

}  // namespace onnxtrain
