// MatMul, and FusedMatMul (MatMul with transposed operands, a scale and an optional bias row:
// passes/transpose_folding.cc and passes/matmul_bias.cc make them) which its gradient uses.
#include "ops/math/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/broadcast.h"
#include "ops/common/float32_sums.h"
#include "ops/common/reduce.h"
#include "runtime/blas.h"
#include "runtime/bfloat16_matmul.h"
#include "runtime/half_convert.h"
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

namespace {

// Where the i-th product of a batch reads its operands (elements from A's and B's start), with
// A and B broadcast along the batch dims they lack.
class BatchOperands {
 public:
  explicit BatchOperands(const MatmulDims& d)
      : d_(d), a_strides_(broadcast_strides(d.a_batch, d.batch)), b_strides_(broadcast_strides(d.b_batch, d.batch)) {}
  std::pair<int64_t, int64_t> offsets(int64_t i) const {
    int64_t rem = i, a_off = 0, b_off = 0;
    for (int dim = d_.batch.rank() - 1; dim >= 0; --dim) {
      const int64_t idx = rem % d_.batch[dim];
      rem /= d_.batch[dim];
      a_off += idx * a_strides_[dim];
      b_off += idx * b_strides_[dim];
    }
    return {a_off * d_.m * d_.k, b_off * d_.k * d_.n};
  }

 private:
  const MatmulDims& d_;
  std::array<int64_t, TensorShape::kMaxRank> a_strides_, b_strides_;
};

// The batched products of In operands into T results (In = T, or bfloat16 into float32), with a
// bias row (of T values) written into the output first.
template <typename In, typename T>
void batched_products(ThreadPool& pool, const MatmulDims& d, bool ta, bool tb, const In* pa, const In* pb, T* pc,
                      T scale, const T* pbias, int64_t bias_size) {
  const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
  const int64_t batches = d.batch.numel();
  if (batches == 0 || d.m == 0 || d.n == 0) return;
  T beta = 0;
  if (pbias) {
    const bool row = bias_size == d.n;
    pool.parallel_for(batches * d.m, std::max<int64_t>(1, 16384 / d.n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        T* dst = pc + r * d.n;
        if (row) std::copy(pbias, pbias + d.n, dst);
        else std::fill(dst, dst + d.n, pbias[0]);
      }
    });
    beta = 1;
  }
  // A stack of A's against one B: a single GEMM over all their rows.
  if (d.b_batch.numel() == 1 && !ta && d.a_batch == d.batch) {
    gemm(false, tb, batches * d.m, d.n, d.k, scale, pa, lda, pb, ldb, beta, pc, d.n, pool);
    return;
  }
  const BatchOperands operands(d);
  auto one = [&](int64_t i, ThreadPool& inner_pool) {
    const auto [a_off, b_off] = operands.offsets(i);
    gemm(ta, tb, d.m, d.n, d.k, scale, pa + a_off, lda, pb + b_off, ldb, beta, pc + i * d.m * d.n, d.n, inner_pool);
  };
  // Many small products: one per thread. Few large ones: let each GEMM split itself.
  if (2.0 * d.m * d.n * d.k < 4e6 && batches > 1) {
    pool.parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i, pool);
    });
  } else {
    for (int64_t i = 0; i < batches; ++i) one(i, pool);
  }
}

// bfloat16 products into a bfloat16 `out` on oneDNN's matmul primitive, which rounds its float32
// sums as it stores them. Each call is single-threaded in the pool: a stack of A's against one B
// is one product over all their rows, split by rows; a batch of products runs one per thread,
// or split by rows where there are fewer products than threads. False where oneDNN has no
// primitive for a part (out is then written again by the caller). oneDNN scales the bias with
// the product (alpha (AB + bias)): with a bias, alpha must be 1.
bool products_into_bfloat16(ThreadPool& pool, const MatmulDims& d, bool ta, bool tb, float alpha, const BHalf* a,
                            const BHalf* b, const float* bias, BHalf* out) {
  const bool stacked = d.b_batch.numel() == 1 && !ta && d.a_batch == d.batch;
  const int64_t batches = stacked ? 1 : d.batch.numel();
  const int64_t m = stacked ? d.batch.numel() * d.m : d.m;
  // m and the operands' and C's starts are set per part.
  Bfloat16Product p = Bfloat16Product::gemm(ta, tb, 0, d.n, d.k, alpha, nullptr, ta ? d.m : d.k, nullptr,
                                            tb ? d.k : d.n, nullptr, d.n);
  p.bias = bias;
  p.c_bfloat16 = true;
  const BatchOperands operands(d);
  std::atomic<bool> all_ran{true};
  // Rows [r0, r1) of product i.
  auto rows = [&](int64_t i, int64_t r0, int64_t r1) {
    const auto [a_off, b_off] = operands.offsets(i);
    Bfloat16Product part = p;
    part.m = r1 - r0;
    part.a = a + a_off + (ta ? r0 : r0 * p.lda);
    part.b = b + b_off;
    part.c = out + i * d.m * d.n + r0 * d.n;
    if (!run_bfloat16_product(part)) all_ran = false;
  };
  const int threads = pool.num_threads();
  if (batches >= threads && batches > 1) {
    pool.parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) rows(i, 0, m);
    });
    return all_ran;
  }
  // Below ~20 MFLOP a product takes a few tens of microseconds: splitting it costs more than it saves.
  const int64_t grain = threads == 1 || 2.0 * m * d.n * d.k < 2e7 ? m : std::max<int64_t>(16, (m + threads - 1) / threads);
  for (int64_t i = 0; i < batches; ++i)
    pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) { rows(i, r0, r1); });
  return all_ran;
}

// bfloat16 operands (autocast's products): accumulated in float32 and rounded once, as eager's
// oneDNN matmul does; on oneDNN's bfloat16 GEMM where the CPU has one, on float32 copies elsewhere.
void matmul_bfloat16(ThreadPool& pool, const MatmulDims& d, const Tensor& a, const Tensor& b, bool ta, bool tb,
                     double alpha, Tensor& out, const Tensor* bias) {
  Tensor bias32;
  if (bias) bias32 = bias->dtype() == DType::Float32 ? *bias : widened_to_float32(pool, *bias);
  if (out.dtype() == DType::BFloat16 && bfloat16_primitives_enabled() && bfloat16_gemm_available() &&
      (!bias || (bias->dim(0) == d.n && alpha == 1.0)) && out.numel() > 0 && d.k > 0 &&
      products_into_bfloat16(pool, d, ta, tb, static_cast<float>(alpha), a.data<BHalf>(), b.data<BHalf>(),
                             bias ? bias32.data<float>() : nullptr, out.data<BHalf>()))
    return;
  // A float32 `out` (a gradient's scratch, summed before it is rounded) takes the sums as they are.
  Tensor product = out.dtype() == DType::Float32 ? out : Tensor::empty(DType::Float32, out.shape());
  const float* pbias = bias ? bias32.data<float>() : nullptr;
  const int64_t bias_size = bias ? bias->dim(0) : 0;
  if (bfloat16_gemm_available()) {
    batched_products(pool, d, ta, tb, a.data<BHalf>(), b.data<BHalf>(), product.data<float>(),
                     static_cast<float>(alpha), pbias, bias_size);
  } else {
    const Tensor a32 = widened_to_float32(pool, a), b32 = widened_to_float32(pool, b);
    batched_products(pool, d, ta, tb, a32.data<float>(), b32.data<float>(), product.data<float>(),
                     static_cast<float>(alpha), pbias, bias_size);
  }
  if (out.dtype() == DType::BFloat16) round_into(pool, product.data<float>(), out);
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, Tensor& out,
            const Tensor* bias) {
  MatmulDims d = matmul_dims(a.shape(), b.shape(), ta, tb, "MatMul");
  OT_CHECK(a.dtype() == b.dtype(), "MatMul: operands have different element types: ", a.str(), " and ", b.str());
  if (bias)
    OT_CHECK((bias->dtype() == a.dtype() || (a.dtype() == DType::BFloat16 && bias->dtype() == DType::Float32)) &&
                 bias->rank() == 1 && !d.b_vector && (bias->dim(0) == d.n || bias->dim(0) == 1),
             "FusedMatMul: bias ", bias->str(), " is not a row of the ", out.str(), " product");
  if (a.dtype() == DType::BFloat16) {
    matmul_bfloat16(pool, d, a, b, ta, tb, alpha, out, bias);
    return;
  }
  dispatch_float(a.dtype(), "MatMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batched_products(pool, d, ta, tb, a.data<T>(), b.data<T>(), out.data<T>(), static_cast<T>(alpha),
                     bias ? bias->data<T>() : nullptr, bias ? bias->dim(0) : 0);
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
    matmul(ctx.threads(), a, b, trans_a_, trans_b_, alpha_, out, ctx.has_input(2) ? &ctx.input(2) : nullptr);
  }

 private:
  bool trans_a_, trans_b_;
  float alpha_;
};

// Operand shapes with numpy.matmul's 1-D promotion applied, and dY's shape to match.
struct PromotedShapes {
  TensorShape a, b, dy;
};

PromotedShapes promote(TensorShape a, TensorShape b, TensorShape dy) {
  OT_CHECK(a.rank() >= 1 && b.rank() >= 1, "operands must have rank >= 1, got ", a.str(), " and ", b.str());
  if (a.rank() == 1) {
    a.insert(0, 1);
    dy.insert(dy.rank() - (b.rank() == 1 ? 0 : 1), 1);
  }
  if (b.rank() == 1) {
    b.push_back(1);
    dy.push_back(1);
  }
  return {a, b, dy};
}

// Writes `full` (a gradient with broadcast batch dims) into `out`, summing the batch dims the
// operand was broadcast along.
template <typename T>
void sum_batch_into(ThreadPool& pool, const T* full, const TensorShape& full_shape, const TensorShape& operand,
                    T* out) {
  std::vector<bool> axes = axes_to_reduce_to(full_shape, operand, "MatMul gradient");
  reduce_sum<T>(pool, full, full_shape, axes, out);
}

// MatMulGradA(dY, B, shape(A)) and MatMulGradB(dY, A, shape(B)) for C = alpha op(A) @ op(B):
//   d op(A) = alpha dY op(B)^T,  d op(B) = alpha op(A)^T dY,
// transposed back where op transposed, then summed over the batch dims the operand was broadcast
// along. Ranks are read at run time, so the rule needs no static shapes.
class MatMulGradKernel final : public Kernel {
 public:
  MatMulGradKernel(const KernelInfo& info, bool for_a)
      : for_a_(for_a),
        trans_a_(info.node.attr_int("transA", 0) != 0),
        trans_b_(info.node.attr_int("transB", 0) != 0),
        alpha_(info.node.attr_float("alpha", 1.0f)),
        sums_(info.node) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    const Tensor& other = ctx.input(1);  // B for dA, A for dB
    const TensorShape target(ctx.input(2).to_int64_vector());
    const TensorShape& a_shape = for_a_ ? target : other.shape();
    const TensorShape& b_shape = for_a_ ? other.shape() : target;
    const PromotedShapes p = promote(a_shape, b_shape, dy.shape());
    const Tensor dyp = dy.view(p.dy);
    const Tensor op = other.view(for_a_ ? p.b : p.a);
    const TensorShape& mine = for_a_ ? p.a : p.b;  // the gradient's promoted shape
    Tensor& out = ctx.allocate_output(0, sums_.output_type(dy.dtype()), target);
    // The product that yields this operand's gradient, in its stored layout.
    const Tensor* x = nullptr;
    const Tensor* y = nullptr;
    bool tx = false, ty = false;
    if (for_a_) {
      if (trans_a_) { x = &op; y = &dyp; tx = trans_b_; ty = true; }
      else { x = &dyp; y = &op; tx = false; ty = !trans_b_; }
    } else {
      if (trans_b_) { x = &dyp; y = &op; tx = true; ty = trans_a_; }
      else { x = &op; y = &dyp; tx = !trans_a_; ty = false; }
    }
    const TensorShape full = matmul_shape(x->shape(), y->shape(), tx, ty, "MatMul gradient");
    if (full.numel() == mine.numel() && full.rank() == mine.rank()) {
      Tensor view = out.view(full);
      matmul(ctx.threads(), *x, *y, tx, ty, alpha_, view);
      return;
    }
    if (try_flattened(ctx, *x, *y, tx, ty, mine, out)) return;
    if (dy.dtype() == DType::BFloat16) {  // summed in float32, rounded once (or not, to float32)
      Tensor products = Tensor::empty(DType::Float32, full);
      matmul(ctx.threads(), *x, *y, tx, ty, alpha_, products);
      Tensor sums = out.dtype() == DType::Float32 ? out : Tensor::empty(DType::Float32, mine);
      sum_batch_into<float>(ctx.threads(), products.data<float>(), full, mine, sums.data<float>());
      if (out.dtype() != DType::Float32) round_into(ctx.threads(), sums.data<float>(), out);
      return;
    }
    dispatch_float(dy.dtype(), "MatMul gradient", [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor scratch(dy.dtype(), full, ctx.scratch(static_cast<size_t>(full.numel()) * sizeof(T)));
      matmul(ctx.threads(), *x, *y, tx, ty, alpha_, scratch);
      sum_batch_into<T>(ctx.threads(), scratch.data<T>(), full, mine, out.data<T>());
    });
  }

 private:
  // A 2-D operand's gradient summed over a stack of matrices, [S..., R, P]^T @ [S..., R, Q]: one
  // GEMM with the stack folded into R (the weight gradient of a Linear on 3-D input).
  bool try_flattened(KernelContext& ctx, const Tensor& x, const Tensor& y, bool tx, bool ty, const TensorShape& mine,
                     Tensor& out) const {
    if (mine.rank() != 2 || !tx || ty || x.rank() < 3 || x.rank() != y.rank()) return false;
    for (int d = 0; d + 2 < x.rank(); ++d)
      if (x.dim(d) != y.dim(d)) return false;
    const int64_t rows = x.shape().size_between(0, x.rank() - 1);
    const int64_t p = x.shape().back(), q = y.shape().back();
    Tensor x2 = x.view({rows, p}), y2 = y.view({rows, q}), o2 = out.view({p, q});
    matmul(ctx.threads(), x2, y2, true, false, alpha_, o2);
    return true;
  }

  bool for_a_;
  bool trans_a_, trans_b_;
  float alpha_;
  Float32Sums sums_;
};

void matmul_gradient(GradBuilder& g) {
  AttributeMap attrs;
  for (const char* key : {"transA", "transB", "alpha"})
    if (g.node().has_attr(key)) attrs[key] = g.node().attrs.at(key);
  const std::string& dy = g.output_grad(0);
  if (g.needs_input_grad(0))
    g.set_input_grad(0, g.op("MatMulGradA", {dy, g.input(1), g.shape_of(g.input(0))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(1))
    g.set_input_grad(1, g.op("MatMulGradB", {dy, g.input(0), g.shape_of(g.input(1))}, attrs, kOnnxTrainDomain));
  if (g.needs_input_grad(2)) g.set_input_grad(2, g.reduce_to_input_shape(dy, 2));  // FusedMatMul's bias
}

}  // namespace

ONNXTRAIN_KERNEL("", "MatMul", kernel_factory(&matmul_kernel), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "FusedMatMul", kernel_factory<FusedMatMulKernel>(),
                 Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MatMulGradA", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<MatMulGradKernel>(info, true);
}, Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "MatMulGradB", [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
  return std::make_unique<MatMulGradKernel>(info, false);
}, Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_GRADIENT("", "MatMul", matmul_gradient);
// bfloat16 products on oneDNN's bfloat16 GEMM (matmul_bfloat16); float16 is widened by the executor.
ONNXTRAIN_NATIVE_16BIT_FLOATS("", "MatMul", {DType::BFloat16});
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "FusedMatMul", {DType::BFloat16});
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "MatMulGradA", {DType::BFloat16});
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "MatMulGradB", {DType::BFloat16});
// A bfloat16 gradient's float32 sums, unrounded, where its node says to = FLOAT: a parameter's
// or a float32 activation's gradient, which autocast's Cast would widen back at once.
ONNXTRAIN_FLOAT32_SUMS(kOnnxTrainDomain, "MatMulGradA");
ONNXTRAIN_FLOAT32_SUMS(kOnnxTrainDomain, "MatMulGradB");
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "FusedMatMul", matmul_gradient);

}  // namespace onnxtrain
