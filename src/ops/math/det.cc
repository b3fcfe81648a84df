// Det: determinants of the trailing M x M matrices of a [..., M, M] input, by LU factorization
// with partial pivoting (in double, whatever the element type). Gradient: DetGrad,
// dA = dY * cofactor(A), where cofactor(A) = det(A) * inv(A)^T for an invertible A.
//
// Singular matrices (an exactly zero pivot) get the true cofactor matrix too, each cofactor from
// its minor's determinant: O(M^5) per singular matrix against O(M^3) for invertible ones, exact
// (zero for rank <= M - 2), never NaN or Inf. This departs from torch 1.13 on purpose: torch
// returns a zero gradient at exactly singular matrices (pytorch/pytorch#80761, #104675), which
// disagrees with its own gradient an ulp away; the cofactor matrix is the derivative.
#include <cmath>
#include <utility>
#include <vector>

#include "autodiff/grad_builder.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Factorizes the n x n row-major `a` in place (L below the diagonal, U on and above it);
// perm[i] is the original row now at row i. Returns det(a); 0 when a pivot is exactly zero.
double lu_factorize(double* a, int64_t n, int64_t* perm) {
  double det = 1;
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < n; ++i)
      if (std::abs(a[i * n + k]) > std::abs(a[p * n + k])) p = i;
    if (a[p * n + k] == 0) return 0;
    if (p != k) {
      for (int64_t j = 0; j < n; ++j) std::swap(a[k * n + j], a[p * n + j]);
      std::swap(perm[k], perm[p]);
      det = -det;
    }
    const double pivot = a[k * n + k];
    det *= pivot;
    for (int64_t i = k + 1; i < n; ++i) {
      const double f = a[i * n + k] /= pivot;
      for (int64_t j = k + 1; j < n; ++j) a[i * n + j] -= f * a[k * n + j];
    }
  }
  return det;
}

double determinant(const double* a, int64_t n, std::vector<double>& work, std::vector<int64_t>& perm) {
  work.assign(a, a + n * n);
  perm.resize(static_cast<size_t>(n));
  return lu_factorize(work.data(), n, perm.data());
}

// cof[i][j] = (-1)^(i+j) det(a without row i and column j): the singular-matrix path.
void cofactors_by_minors(const double* a, int64_t n, double* cof) {
  std::vector<double> minor(static_cast<size_t>((n - 1) * (n - 1))), work;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double* m = minor.data();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < n; ++c)
          if (r != i && c != j) *m++ = a[r * n + c];
      const double d = n == 1 ? 1.0 : determinant(minor.data(), n - 1, work, perm);
      cof[i * n + j] = (i + j) % 2 == 0 ? d : -d;
    }
}

// cofactor(a) = det * inv(a)^T: solve a^T X = det * I with the LU of a (a^T = U^T L^T P).
void cofactors(const double* a, int64_t n, double* cof, std::vector<double>& lu, std::vector<int64_t>& perm) {
  const double det = determinant(a, n, lu, perm);
  if (det == 0) {
    cofactors_by_minors(a, n, cof);
    return;
  }
  // inv(a) = U^-1 L^-1 P; column c of inv(a)^T is row c of inv(a). Row c of inv(a) solves
  // x^T a = e_c^T, i.e. a^T x = e_c: U^T y = e_c, L^T z = y, x = P^T z.
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < n; ++i) {  // U^T y = e_c, forward
      double s = i == c ? 1.0 : 0.0;
      for (int64_t k = 0; k < i; ++k) s -= lu[k * n + i] * y[k];
      y[i] = s / lu[i * n + i];
    }
    for (int64_t i = n - 1; i >= 0; --i) {  // L^T z = y, backward (unit diagonal)
      double s = y[i];
      for (int64_t k = i + 1; k < n; ++k) s -= lu[k * n + i] * y[k];
      y[i] = s;
    }
    // x[perm[i]] = z[i]; inv(a)[c][perm[i]] = z[i], so cof[perm[i]][c] = det * z[i].
    for (int64_t i = 0; i < n; ++i) cof[perm[i] * n + c] = det * y[i];
  }
}

struct MatrixBatch {
  int64_t count, n;
};

MatrixBatch matrices_of(const Tensor& a, const char* what) {
  OT_CHECK(a.rank() >= 2 && a.dim(a.rank() - 1) == a.dim(a.rank() - 2), what,
           ": input must be [..., M, M] (square matrices), got ", a.str());
  return {a.shape().size_between(0, a.rank() - 2), a.dim(a.rank() - 1)};
}

int64_t grain_for(int64_t n) { return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n * n * n, 1)); }

void det_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const MatrixBatch m = matrices_of(a, "Det");
  TensorShape out_shape = a.shape();
  out_shape.resize(a.rank() - 2);
  Tensor& out = ctx.allocate_output(0, a.dtype(), out_shape);
  dispatch_float(a.dtype(), "Det", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = a.data<T>();
    T* dst = out.data<T>();
    ctx.threads().parallel_for(m.count, grain_for(m.n), [&](int64_t b0, int64_t b1) {
      std::vector<double> mat, work;
      std::vector<int64_t> perm;
      for (int64_t b = b0; b < b1; ++b) {
        mat.assign(src + b * m.n * m.n, src + (b + 1) * m.n * m.n);
        dst[b] = static_cast<T>(determinant(mat.data(), m.n, work, perm));
      }
    });
  });
}

// DetGrad(dY, A) -> dA = dY * cofactor(A).
void det_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& a = ctx.input(1);
  const MatrixBatch m = matrices_of(a, "DetGrad");
  OT_CHECK(dy.numel() == m.count, "DetGrad: dY ", dy.str(), " must hold one value per matrix of A ", a.str());
  Tensor& da = ctx.allocate_output(0, a.dtype(), a.shape());
  dispatch_float(a.dtype(), "DetGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = a.data<T>();
    const T* g = dy.data<T>();
    T* dst = da.data<T>();
    const int64_t nn = m.n * m.n;
    ctx.threads().parallel_for(m.count, grain_for(m.n), [&](int64_t b0, int64_t b1) {
      std::vector<double> mat, cof(static_cast<size_t>(nn)), lu;
      std::vector<int64_t> perm;
      for (int64_t b = b0; b < b1; ++b) {
        mat.assign(src + b * nn, src + (b + 1) * nn);
        cofactors(mat.data(), m.n, cof.data(), lu, perm);
        const double gb = static_cast<double>(g[b]);
        for (int64_t i = 0; i < nn; ++i) dst[b * nn + i] = static_cast<T>(gb * cof[i]);
      }
    });
  });
}

void det_gradient(GradBuilder& g) {
  std::string da = g.op("DetGrad", {g.output_grad(0), g.input(0)}, {}, kOnnxTrainDomain);
  g.set_input_grad(0, da);
}

}  // namespace

ONNXTRAIN_KERNEL("", "Det", kernel_factory(&det_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "DetGrad", kernel_factory(&det_grad_kernel), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Det", det_gradient);

}  // namespace onnxtrain
