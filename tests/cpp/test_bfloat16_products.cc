// bfloat16 products on oneDNN's matmul primitive (runtime/bfloat16_matmul.h), as ops/math/matmul.cc
// routes them: a bfloat16 result rounded once from the float32 sums, within one bfloat16 step of
// the product computed in double from the same bfloat16 values; every layout (a stack of A's
// folded into rows, batches broadcast either way, transposed operands), with a bias row and a
// scale, on one thread and split across two; a float32 weight gradient through a long vocabulary
// (the transposed-A rule of runtime/blas.cc), accumulating; and the primitive cache's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/math/matmul.h"
#include "runtime/bfloat16_matmul.h"
#include "runtime/blas.h"
#include "runtime/thread_pool.h"
#include "tests/cpp/half_testing.h"

namespace onnxtrain {
namespace {

using half_testing::random_sixteen;

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::BFloat16 ? bfloat16_to_float(t.data<BHalf>()[i]) : t.data<float>()[i];
}

// alpha * op(a) @ op(b) (+ bias) in double, batch dims broadcast as numpy does (rank 3 at most
// here), and beside each element the sum of its terms' magnitudes (`magnitudes`, when given).
std::vector<double> reference(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, const Tensor* bias,
                              const TensorShape& out, std::vector<double>* magnitudes = nullptr) {
  const int64_t m = out[out.rank() - 2], n = out[out.rank() - 1];
  const int64_t k = ta ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
  const int64_t batches = out.numel() / (m * n);
  const int64_t a_batches = a.numel() / (m * k), b_batches = b.numel() / (k * n);
  std::vector<double> r(static_cast<size_t>(out.numel()));
  if (magnitudes) magnitudes->assign(r.size(), 0.0);
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t ao = (a_batches == 1 ? 0 : i) * m * k, bo = (b_batches == 1 ? 0 : i) * k * n;
    for (int64_t row = 0; row < m; ++row)
      for (int64_t col = 0; col < n; ++col) {
        double s = 0, size = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double term = at(a, ao + (ta ? p * m + row : row * k + p)) * at(b, bo + (tb ? col * k + p : p * n + col));
          s += term;
          size += std::fabs(term);
        }
        const size_t e = static_cast<size_t>((i * m + row) * n + col);
        r[e] = alpha * s + (bias ? at(*bias, col) : 0.0);
        if (magnitudes) (*magnitudes)[e] = std::fabs(alpha) * size + (bias ? std::fabs(at(*bias, col)) : 0.0);
      }
  }
  return r;
}

// One bfloat16 step of the exact result, plus what float32 sums of that many terms may lose in
// any order (a result near zero cancels terms far larger than itself).
void expect_within_one_step(const Tensor& got, const std::vector<double>& exact, const std::vector<double>& magnitudes,
                            int64_t terms, const std::string& what) {
  for (size_t i = 0; i < exact.size(); ++i) {
    const double step = std::ldexp(1.0, std::ilogb(exact[i] == 0 ? 1e-30 : exact[i]) - 7) +
                        static_cast<double>(terms) * std::ldexp(magnitudes[i], -24);
    ASSERT_LE(std::fabs(at(got, static_cast<int64_t>(i)) - exact[i]), step) << what << ", element " << i;
  }
}

struct Layout {
  const char* name;
  TensorShape a, b;
  bool ta, tb;
};

TEST(Bfloat16Products, RoundOnceInEveryLayoutOnOneAndTwoThreads) {
  if (!bfloat16_gemm_available()) GTEST_SKIP() << "no bfloat16 instructions: the products widen to float32";
  const std::vector<Layout> layouts{
      {"a stack of A's against one B (a Linear)", {3, 40, 24}, {33, 24}, false, true},
      {"one product, plain", {150, 24}, {24, 33}, false, false},
      {"a batch broadcasting B", {4, 40, 24}, {1, 24, 33}, false, false},
      {"a batch broadcasting A, transposed A", {1, 24, 40}, {4, 24, 33}, true, false},
      {"a batch, both transposed (attention's scores)", {6, 24, 40}, {6, 33, 24}, true, true},
      {"one large product split by rows, transposed A", {300, 260}, {300, 200}, true, false},
  };
  std::mt19937 gen(5);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Layout& l : layouts) {
      // A scale, a bias row, and both (oneDNN would scale the bias too: that one takes the GEMM).
      for (const auto& [alpha, with_bias] : {std::pair{0.5, false}, std::pair{1.0, true}, std::pair{0.5, true}}) {
        const std::string what = std::string(l.name) + ", alpha " + std::to_string(alpha) + (with_bias ? ", bias" : "") +
                                 ", " + std::to_string(threads) + " thread(s)";
        const Tensor a = random_sixteen(DType::BFloat16, l.a, gen), b = random_sixteen(DType::BFloat16, l.b, gen);
        const TensorShape shape = matmul_shape(l.a, l.b, l.ta, l.tb, "test");
        const Tensor bias = random_sixteen(DType::BFloat16, {shape[shape.rank() - 1]}, gen);
        Tensor out = Tensor::empty(DType::BFloat16, shape);
        matmul(pool, a, b, l.ta, l.tb, alpha, out, with_bias ? &bias : nullptr);
        std::vector<double> magnitudes;
        const std::vector<double> exact = reference(a, b, l.ta, l.tb, alpha, with_bias ? &bias : nullptr, shape, &magnitudes);
        expect_within_one_step(out, exact, magnitudes, (l.ta ? l.a[l.a.rank() - 2] : l.a[l.a.rank() - 1]) + 1, what);
      }
    }
  }
}

TEST(Bfloat16Products, AWeightGradientThroughALongVocabularyAccumulatesInFloat32) {
  if (!bfloat16_gemm_available()) GTEST_SKIP() << "no bfloat16 instructions: the products widen to float32";
  // dW = dY^T X with dY [tokens, vocabulary]: transposed A, m = 2048 >= 16 n.
  const int64_t tokens = 48, vocabulary = 2048, hidden = 16;
  std::mt19937 gen(7);
  const Tensor dy = random_sixteen(DType::BFloat16, {tokens, vocabulary}, gen);
  const Tensor x = random_sixteen(DType::BFloat16, {tokens, hidden}, gen);
  const std::vector<double> exact = reference(dy, x, true, false, 1.0, nullptr, {vocabulary, hidden});
  ThreadPool pool(2);
  std::vector<float> c(static_cast<size_t>(vocabulary * hidden), 1.0f);
  gemm(true, false, vocabulary, hidden, tokens, 1.0f, dy.data<BHalf>(), vocabulary, x.data<BHalf>(), hidden, 1.0f,
       c.data(), hidden, pool);
  for (size_t i = 0; i < exact.size(); ++i)
    ASSERT_NEAR(c[i], exact[i] + 1.0, 1e-5 * (1 + std::fabs(exact[i]))) << "element " << i;
}

TEST(Bfloat16Products, ThePrimitiveCacheKeepsItsBound) {
  if (!bfloat16_gemm_available()) GTEST_SKIP() << "no bfloat16 instructions: the products widen to float32";
  std::mt19937 gen(9);
  const Tensor b = random_sixteen(DType::BFloat16, {8, 4}, gen);
  ThreadPool pool(1);
  for (int64_t rows = 1; rows <= 300; ++rows) {  // a primitive per row count
    const Tensor a = random_sixteen(DType::BFloat16, {rows, 8}, gen);
    Tensor out = Tensor::empty(DType::BFloat16, {rows, 4});
    matmul(pool, a, b, false, false, 1.0, out);
  }
  EXPECT_LE(bfloat16_matmul_primitives_kept(), 256u);
  EXPECT_GE(bfloat16_matmul_primitives_kept(), 200u);
}

}  // namespace
}  // namespace onnxtrain
