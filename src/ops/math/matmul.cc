// MatMul, and FusedMatMul (MatMul with transposed operands and a scale) which its gradient uses.
#include "ops/math/matmul.h"

#include "autodiff/grad_builder.h"
#include "ops/common/broadcast.h"
#include "ops/registry.h"
#include "runtime/blas.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

struct MatmulDims {
  TensorShape batch;  // broadcast batch shape
  TensorShape a_batch, b_batch;
  int64_t m, n, k;
  bool a_vector, b_vector;
};

MatmulDims matmul_dims(const TensorShape& a, const TensorShape& b, bool ta, bool tb, const char* what) {
  OT_CHECK(a.rank() >= 1 && b.rank() >= 1, what, ": operands must have rank >= 1, got ", a.str(), " and ", b.str());
  OT_CHECK(!(ta && a.rank() == 1) && !(tb && b.rank() == 1), what, ": cannot transpose a 1-D operand");
  MatmulDims d;
  d.a_vector = a.rank() == 1;
  d.b_vector = b.rank() == 1;
  int64_t a_rows = d.a_vector ? 1 : a[a.rank() - 2], a_cols = a.back();
  int64_t b_rows = d.b_vector ? b[0] : b[b.rank() - 2], b_cols = d.b_vector ? 1 : b.back();
  d.m = ta ? a_cols : a_rows;
  d.k = ta ? a_rows : a_cols;
  int64_t kb = tb ? b_cols : b_rows;
  d.n = tb ? b_rows : b_cols;
  OT_CHECK(d.k == kb, what, ": inner dimensions differ: ", a.str(), (ta ? "^T" : ""), " @ ", b.str(),
           (tb ? "^T" : ""));
  d.a_batch = d.a_vector ? TensorShape{} : TensorShape(a.begin(), a.end() - 2);
  d.b_batch = d.b_vector ? TensorShape{} : TensorShape(b.begin(), b.end() - 2);
  d.batch = broadcast_shapes({d.a_batch, d.b_batch}, what);
  return d;
}

}  // namespace

TensorShape matmul_shape(const TensorShape& a, const TensorShape& b, bool ta, bool tb, const char* what) {
  MatmulDims d = matmul_dims(a, b, ta, tb, what);
  TensorShape out = d.batch;
  if (!d.a_vector) out.push_back(d.m);
  if (!d.b_vector) out.push_back(d.n);
  return out;
}

void matmul(ThreadPool& pool, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, Tensor& out) {
  MatmulDims d = matmul_dims(a.shape(), b.shape(), ta, tb, "MatMul");
  OT_CHECK(a.dtype() == b.dtype(), "MatMul: operands have different element types: ", a.str(), " and ", b.str());
  const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
  dispatch_float(a.dtype(), "MatMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    const T scale = static_cast<T>(alpha);
    const int64_t batches = d.batch.numel();
    if (batches == 0 || d.m == 0 || d.n == 0) return;
    // A stack of A's against one B: a single GEMM over all their rows.
    if (d.b_batch.numel() == 1 && !ta && d.a_batch == d.batch) {
      gemm<T>(false, tb, batches * d.m, d.n, d.k, scale, pa, lda, pb, ldb, T(0), pc, d.n, pool);
      return;
    }
    const auto a_strides = broadcast_strides(d.a_batch, d.batch);
    const auto b_strides = broadcast_strides(d.b_batch, d.batch);
    auto one = [&](int64_t i, ThreadPool& inner_pool) {
      int64_t rem = i, a_off = 0, b_off = 0;
      for (int dim = d.batch.rank() - 1; dim >= 0; --dim) {
        int64_t idx = rem % d.batch[dim];
        rem /= d.batch[dim];
        a_off += idx * a_strides[dim];
        b_off += idx * b_strides[dim];
      }
      gemm<T>(ta, tb, d.m, d.n, d.k, scale, pa + a_off * d.m * d.k, lda, pb + b_off * d.k * d.n, ldb, T(0),
              pc + i * d.m * d.n, d.n, inner_pool);
    };
    // Many small products: one per thread. Few large ones: let each GEMM split itself.
    if (2.0 * d.m * d.n * d.k < 4e6 && batches > 1) {
      pool.parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0; i < b1; ++i) one(i, pool);
      });
    } else {
      for (int64_t i = 0; i < batches; ++i) one(i, pool);
    }
  });
}

namespace {

void matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.allocate_output(0, a.dtype(), matmul_shape(a.shape(), b.shape(), false, false, "MatMul"));
  matmul(ctx.threads(), a, b, false, false, 1.0, out);
}

class FusedMatMulKernel final : public Kernel {
 public:
  explicit FusedMatMulKernel(const KernelInfo& info)
      : trans_a_(info.node.attr_int("transA", 0) != 0),
        trans_b_(info.node.attr_int("transB", 0) != 0),
        alpha_(info.node.attr_float("alpha", 1.0f)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& out =
        ctx.allocate_output(0, a.dtype(), matmul_shape(a.shape(), b.shape(), trans_a_, trans_b_, "FusedMatMul"));
    matmul(ctx.threads(), a, b, trans_a_, trans_b_, alpha_, out);
  }

 private:
  bool trans_a_, trans_b_;
  float alpha_;
};

int declared_rank(GradBuilder& g, int input) {
  const ValueInfo* vi = g.info(g.input(input));
  OT_CHECK(vi && vi->shape, g.node().describe(), ": the rank of input '", g.input(input),
           "' is unknown, so its gradient cannot be built");
  return static_cast<int>(vi->shape->size());
}

std::string fused(GradBuilder& g, const std::string& a, const std::string& b, bool ta, bool tb, float alpha = 1.0f) {
  AttributeMap attrs{{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}};
  if (alpha != 1.0f) attrs["alpha"] = Attribute::of_float(alpha);
  return g.op("FusedMatMul", {a, b}, attrs, kOnnxTrainDomain);
}

// Shared by MatMul (trans = false, alpha = 1) and FusedMatMul. With C = alpha op(A) op(B):
// d op(A) = alpha dC op(B)^T and d op(B) = alpha op(A)^T dC, transposed back where op transposed.
void matmul_gradient_impl(GradBuilder& g, bool ta, bool tb, float alpha) {
  const std::string& dy = g.output_grad(0);
  const std::string& a = g.input(0);
  const std::string& b = g.input(1);
  const int ra = declared_rank(g, 0), rb = declared_rank(g, 1);
  if (ra >= 2 && rb >= 2) {
    if (g.needs_input_grad(0)) {
      std::string da = ta ? fused(g, b, dy, tb, true, alpha) : fused(g, dy, b, false, !tb, alpha);
      g.set_input_grad(0, g.reduce_to_input_shape(da, 0));
    }
    if (g.needs_input_grad(1)) {
      std::string db = tb ? fused(g, dy, a, true, ta, alpha) : fused(g, a, dy, !ta, false, alpha);
      g.set_input_grad(1, g.reduce_to_input_shape(db, 1));
    }
    return;
  }
  auto unsqueeze = [&](const std::string& v, int64_t axis) { return g.op("Unsqueeze", {v, g.int64s({axis})}); };
  auto squeeze = [&](const std::string& v, int64_t axis) { return g.op("Squeeze", {v, g.int64s({axis})}); };
  auto scaled = [&](const std::string& v) { return alpha == 1.0f ? v : g.op("Mul", {v, g.scalar_like(alpha, v)}); };
  if (ra == 1 && rb == 1) {  // dot product
    if (g.needs_input_grad(0)) g.set_input_grad(0, scaled(g.op("Mul", {dy, b})));
    if (g.needs_input_grad(1)) g.set_input_grad(1, scaled(g.op("Mul", {dy, a})));
  } else if (ra == 1) {  // [K] @ op(B)[..., K, N] -> [..., N]
    std::string dy_col = unsqueeze(dy, -1);
    if (g.needs_input_grad(0))
      g.set_input_grad(0, g.reduce_to_input_shape(squeeze(fused(g, b, dy_col, tb, false, alpha), -1), 0));
    if (g.needs_input_grad(1)) {
      std::string a_col = unsqueeze(a, 1), dy_row = unsqueeze(dy, -2);
      std::string db = tb ? fused(g, dy_row, a_col, true, true, alpha) : fused(g, a_col, dy_row, false, false, alpha);
      g.set_input_grad(1, g.reduce_to_input_shape(db, 1));
    }
  } else {  // op(A)[..., M, K] @ [K] -> [..., M]
    std::string dy_col = unsqueeze(dy, -1);
    if (g.needs_input_grad(0)) {
      std::string b_row = unsqueeze(b, 0);
      std::string da = ta ? fused(g, b_row, dy_col, true, true, alpha) : fused(g, dy_col, b_row, false, false, alpha);
      g.set_input_grad(0, g.reduce_to_input_shape(da, 0));
    }
    if (g.needs_input_grad(1))
      g.set_input_grad(1, g.reduce_to_input_shape(squeeze(fused(g, a, dy_col, !ta, false, alpha), -1), 1));
  }
}

void matmul_gradient(GradBuilder& g) { matmul_gradient_impl(g, false, false, 1.0f); }

void fused_matmul_gradient(GradBuilder& g) {
  const Node& n = g.node();
  matmul_gradient_impl(g, n.attr_int("transA", 0) != 0, n.attr_int("transB", 0) != 0, n.attr_float("alpha", 1.0f));
}

}  // namespace

ONNXTRAIN_KERNEL("", "MatMul", kernel_factory(&matmul_kernel));
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "FusedMatMul", kernel_factory<FusedMatMulKernel>());
ONNXTRAIN_GRADIENT("", "MatMul", matmul_gradient);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "FusedMatMul", fused_matmul_gradient);

}  // namespace onnxtrain
