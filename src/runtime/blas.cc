#include "runtime/blas.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"
#include "runtime/bfloat16_matmul.h"
#include "runtime/openmp.h"
#include "runtime/thread_pool.h"

// oneDNN's bfloat16 GEMM, row-major as dnnl_sgemm, exported by libdnnl but left out of its 2.6
// public header.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t m, dnnl_dim_t n,
                                                 dnnl_dim_t k, float alpha, const onnxtrain::BHalf* a,
                                                 dnnl_dim_t lda, const onnxtrain::BHalf* b, dnnl_dim_t ldb,
                                                 float beta, float* c, dnnl_dim_t ldc);

namespace onnxtrain {
namespace {

void ensure_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Which library runs float32 GEMMs. With AVX-512, oneDNN's sgemm kernels run about twice as fast
// as OpenBLAS's; with AVX2 only, OpenBLAS is as fast or faster on every shape of the zoo and
// oneDNN falls to 40-70 GFLOP/s on transposed-A products with a long inner dimension (the weight
// gradients), against OpenBLAS's 89. ONNXTRAIN_SGEMM=onednn|openblas overrides, for measuring.
bool sgemm_uses_onednn() {
  static const bool use = [] {
    if (const char* env = std::getenv("ONNXTRAIN_SGEMM")) {
      const std::string v = env;
      if (v == "onednn") return true;
      if (v == "openblas") return false;
    }
    return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core;
  }();
  return use;
}

// Both run single-threaded inside the pool's chunks (runtime/openmp.h).
void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!sgemm_uses_onednn()) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return;
  }
  SingleThreadedOpenMP one_thread;
  dnnl_status_t status =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  OT_CHECK(status == dnnl_success, "oneDNN sgemm failed with status ", static_cast<int>(status), " for ", m, "x", n,
           "x", k);
}
void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BHalf* a, int64_t lda,
               const BHalf* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  SingleThreadedOpenMP one_thread;
  // A weight gradient through a long vocabulary (op(A) = A^T with m >> n: an LM head's 32000 x 768
  // from 1024 tokens) runs faster on the matmul primitive: 93 against 116 ms in llama_100m's step
  // with AMX, one thread; alike on the other shapes, and without AMX.
  if (ta && !tb && m >= 16 * n && bfloat16_primitives_enabled() && (beta == 0.0f || beta == 1.0f)) {
    Bfloat16Product p = Bfloat16Product::gemm(true, false, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    p.accumulate = beta == 1.0f;
    if (run_bfloat16_product(p)) return;
  }
  dnnl_status_t status = dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  OT_CHECK(status == dnnl_success, "oneDNN bfloat16 GEMM failed with status ", static_cast<int>(status), " for ", m,
           "x", n, "x", k);
}

template <typename In, typename T>
void split_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const In* a, int64_t lda,
                const In* b, int64_t ldb, T beta, T* c, int64_t ldc, ThreadPool& pool) {
  if (m == 0 || n == 0) return;
  ensure_single_threaded_blas();
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  // Split the larger output dimension across threads when the product is big enough to pay for it.
  const double flops = 2.0 * double(m) * double(n) * double(k);
  int threads = pool.num_threads();
  // Below ~20 MFLOP a GEMM takes a few tens of microseconds: splitting it costs more than it saves.
  if (threads == 1 || flops < 2e7) {
    blas_call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= n) {
    int64_t grain = std::max<int64_t>(16, (m + threads - 1) / threads);
    pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
      const In* a_part = trans_a ? a + r0 : a + r0 * lda;
      blas_call(trans_a, trans_b, r1 - r0, n, k, alpha, a_part, lda, b, ldb, beta, c + r0 * ldc, ldc);
    });
  } else {
    int64_t grain = std::max<int64_t>(16, (n + threads - 1) / threads);
    pool.parallel_for(n, grain, [&](int64_t c0, int64_t c1) {
      const In* b_part = trans_b ? b + c0 * ldb : b + c0;
      blas_call(trans_a, trans_b, m, c1 - c0, k, alpha, a, lda, b_part, ldb, beta, c + c0, ldc);
    });
  }
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, ThreadPool& pool) {
  split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BHalf* a, int64_t lda,
          const BHalf* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool) {
  split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
}

bool bfloat16_gemm_available() {
  static const bool available = [] {
    // The ISA values are bit sets (avx2_vnni is numerically above avx512_core_bf16 but lacks it).
    // Without bfloat16 instructions oneDNN emulates the GEMM on AVX-512 at about a fifth of its
    // sgemm's speed (34 against 159 GFLOP/s, one thread, ONEDNN_MAX_CPU_ISA=AVX512_CORE on a
    // Xeon): widening both operands to float32 costs far less.
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) return false;
    const BHalf one{0x3f80};
    float c = 0;
    SingleThreadedOpenMP one_thread;
    return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == dnnl_success && c == 1.0f;
  }();
  return available;
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t, ThreadPool&);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t, ThreadPool&);

}  // namespace onnxtrain
