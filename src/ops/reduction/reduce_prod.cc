// ReduceProd and its gradient, exact when elements are 0 (where Y / X would divide by zero).
#include <vector>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/reduction/reduce_common.h"

namespace onnxtrain {
namespace {

template <typename T>
struct ProdOp {
  T identity = T(1);
  T pre(T v) const { return v; }
  T combine(T a, T b) const { return a * b; }
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

// For every element of X, the flat offsets of the elements of its reduced group, in row-major
// order: `relative` is the same for every group, `base` differs per output element.
struct GroupOffsets {
  std::vector<int64_t> relative, base;
};

GroupOffsets group_offsets(const TensorShape& shape, const std::vector<bool>& reduce) {
  const int rank = shape.rank();
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
  for (int d = rank - 2; d >= 0; --d) stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * shape[d + 1];
  GroupOffsets g;
  g.relative.push_back(0);
  g.base.push_back(0);
  // Each dim multiplies one of the two lists, innermost last so that both stay row-major.
  for (int d = 0; d < rank; ++d) {
    std::vector<int64_t>& list = reduce[static_cast<size_t>(d)] ? g.relative : g.base;
    std::vector<int64_t> grown;
    grown.reserve(list.size() * static_cast<size_t>(shape[d]));
    for (int64_t v : list)
      for (int64_t i = 0; i < shape[d]; ++i) grown.push_back(v + i * stride[static_cast<size_t>(d)]);
    list.swap(grown);
  }
  return g;
}

// Inputs: dY (keepdims-shaped), X, Y. PyTorch's prod backward, branch for branch, so that zeros,
// infinities and NaN give eager's numbers: with no zero anywhere in X, dX = dY * Y / X; otherwise
// dX is dY times the product of the other elements of the group (prefix times suffix product).
void reduce_prod_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
  const std::vector<bool> reduce = axes_to_reduce_to(x.shape(), dy.shape(), "ReduceProdGrad");
  dispatch_float(x.dtype(), "ReduceProdGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    const int64_t n = x.numel();
    if (n == 0) return;  // an empty X has an empty gradient (and its reduced groups hold nothing)
    bool any_zero = false;
    for (int64_t i = 0; i < n; ++i) any_zero = any_zero || px[i] == T(0);
    const GroupOffsets groups = group_offsets(x.shape(), reduce);
    const int64_t size = static_cast<int64_t>(groups.relative.size());
    ctx.threads().parallel_for(static_cast<int64_t>(groups.base.size()), std::max<int64_t>(1, (1 << 14) / size),
                               [&](int64_t o0, int64_t o1) {
                                 std::vector<T> prefix(static_cast<size_t>(size));
                                 for (int64_t o = o0; o < o1; ++o) {
                                   const int64_t base = groups.base[static_cast<size_t>(o)];
                                   if (!any_zero) {
                                     for (int64_t k = 0; k < size; ++k) {
                                       const int64_t at = base + groups.relative[static_cast<size_t>(k)];
                                       pdx[at] = pdy[o] * (py[o] / px[at]);
                                     }
                                     continue;
                                   }
                                   T run = T(1);
                                   for (int64_t k = 0; k < size; ++k) {
                                     prefix[static_cast<size_t>(k)] = run;
                                     run *= px[base + groups.relative[static_cast<size_t>(k)]];
                                   }
                                   run = T(1);
                                   for (int64_t k = size; k-- > 0;) {
                                     const int64_t at = base + groups.relative[static_cast<size_t>(k)];
                                     pdx[at] = pdy[o] * (prefix[static_cast<size_t>(k)] * run);
                                     run *= px[at];
                                   }
                                 }
                               });
  });
}

void reduce_prod_gradient(GradBuilder& g) {
  std::string dy = reduced_keepdims(g, g.output_grad(0), kReduceAxesInputSince);
  std::string y = reduced_keepdims(g, g.output(0), kReduceAxesInputSince);
  g.set_input_grad(0, g.op("ReduceProdGrad", {dy, g.input(0), y}, {}, kOnnxTrainDomain));
}

}  // namespace

ONNXTRAIN_KERNEL("", "ReduceProd", kernel_factory<ReduceKernel<ReduceProdImpl>>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "ReduceProdGrad", kernel_factory(&reduce_prod_grad),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "ReduceProd", reduce_prod_gradient);

}  // namespace onnxtrain
