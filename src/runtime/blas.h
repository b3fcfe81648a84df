#pragma once
// Dense matrix products for kernels. Row-major; the engine's pool splits large products across
// its threads and each part runs in single-threaded OpenBLAS.
#include <cstdint>

namespace onnxtrain {

class ThreadPool;

// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T. A is MxK after op, B is KxN.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, ThreadPool& pool);

}  // namespace onnxtrain
