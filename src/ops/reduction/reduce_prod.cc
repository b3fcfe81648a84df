// ReduceProd and its gradient, exact when elements are 0 (where Y / X would divide by zero).
#include "autodiff/grad_builder.h"
#include "ops/reduction/reduce_common.h"
#include "ops/registry.h"

namespace onnxtrain {
namespace {

template <typename T>
struct ProdOp {
  T identity = T(1);
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return a * b; }
};

// The product of the nonzero elements, and the number of zeros.
template <typename T>
struct ProdNonzeroOp {
  T identity = T(1);
  T pre(T v) const { return v == T(0) ? T(1) : v; }
  T combine(T a, T b) const { return a * b; }
};

template <typename T>
struct CountZerosOp {
  T identity = T(0);
  T pre(T v) const { return v == T(0) ? T(1) : T(0); }
  T combine(T a, T b) const { return a + b; }
};

struct ReduceProdImpl {
  static constexpr const char* kName = "ReduceProd";
  static constexpr int kAxesInputSince = kReduceAxesInputSince;
  static void run(KernelContext& ctx, const ReduceAxes& axes) {
    dispatch_reduce(ctx.input(0).dtype(), kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_reduce<T>(ctx, axes, ProdOp<T>{});
    });
  }
};

// Inputs: dY (keepdims-shaped), X. Per reduced group with P the product of its nonzero elements:
// no zero: dX = dY P / X; one zero: dX = dY P at the zero and 0 elsewhere; more: dX = 0.
// This is the product of the other elements in every case, as PyTorch's prod backward computes.
void reduce_prod_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  ReduceGroups groups = reduce_groups(x.shape(), axes_to_reduce_to(x.shape(), dy.shape(), "ReduceProdGrad"));
  dispatch_float(x.dtype(), "ReduceProdGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t m = dy.numel(), extra = reduce_scratch_elems(groups);
    T* mem = static_cast<T*>(ctx.scratch(static_cast<size_t>(2 * m + extra) * sizeof(T)));
    T* scaled = mem;
    T* zeros = mem + m;
    T* tmp = extra ? mem + 2 * m : nullptr;
    reduce_axes(ctx.threads(), x.data<T>(), groups, scaled, tmp, ProdNonzeroOp<T>{});
    reduce_axes(ctx.threads(), x.data<T>(), groups, zeros, tmp, CountZerosOp<T>{});
    const T* pdy = dy.data<T>();
    for (int64_t i = 0; i < m; ++i) scaled[i] *= pdy[i];
    Tensor a(x.dtype(), dy.shape(), scaled), b(x.dtype(), dy.shape(), zeros);
    map_over_input<T>(ctx.threads(), x, a, b, dx, [](T xv, T s, T z) {
      if (z == T(0)) return s / xv;
      return z == T(1) && xv == T(0) ? s : T(0);
    });
  });
}

void reduce_prod_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceProdGrad", {dy, g.input(0)}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReduceProd", kernel_factory<ReduceKernel<ReduceProdImpl>>());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceProdGrad", kernel_factory(&reduce_prod_grad));
ONNXTRAIN_GRADIENT("", "ReduceProd", reduce_prod_gradient);

}  // namespace onnxtrain
