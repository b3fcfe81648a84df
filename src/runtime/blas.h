#pragma once
// Dense matrix products for kernels. Row-major; the engine's pool splits large products across
// its threads and each part runs in single-threaded OpenBLAS.
#include <cstdint>

#include "core/half.h"

namespace onnxtrain {

class ThreadPool;

// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T. A is MxK after op, B is KxN.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, ThreadPool& pool);

// The same over bfloat16 operands, accumulated in float32 into a float32 C (one rounding when the
// caller narrows C): oneDNN's bfloat16 GEMM, on AMX tiles or AVX512_BF16 as the CPU has them.
// Only where bfloat16_gemm_available(); elsewhere the caller widens to float32.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BHalf* a, int64_t lda,
          const BHalf* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool);

// Whether oneDNN runs bfloat16 GEMMs in bfloat16 instructions on this CPU (AVX512_BF16 or AMX,
// within ONEDNN_MAX_CPU_ISA).
bool bfloat16_gemm_available();

}  // namespace onnxtrain
