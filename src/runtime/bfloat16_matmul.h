#pragma once
// oneDNN's matmul primitive for bfloat16 products, one primitive per shape, writing a float32 or a
// bfloat16 C. A bfloat16 C is rounded once from the float32 sums inside the kernel, so a product
// that autocast wants in bfloat16 never stores its float32 sums: for a Linear of llama_100m that is
// 8 MB written and read again per call, more than the product's own inputs.
#include <cstdint>

#include "core/half.h"

namespace onnxtrain {

// C = alpha * (op(A) op(B) + bias, a row of n float32) (+ C when accumulate): oneDNN scales the bias.
struct Bfloat16Product {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const BHalf* a = nullptr;
  int64_t lda = 0;
  const BHalf* b = nullptr;
  int64_t ldb = 0;
  const float* bias = nullptr;
  bool accumulate = false;
  void* c = nullptr;  // float* or BHalf*
  int64_t ldc = 0;
  bool c_bfloat16 = false;

  // A product without bias into a float32 C, as a GEMM call gives it.
  static Bfloat16Product gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BHalf* a,
                              int64_t lda, const BHalf* b, int64_t ldb, float* c, int64_t ldc) {
    // In member order: no bias, no accumulation, a float32 C.
    return {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, nullptr, false, c, ldc, false};
  }
};

// Runs p single-threaded (the caller's pool splits). Returns false where oneDNN has no primitive
// for the shape; the caller then computes it another way.
bool run_bfloat16_product(const Bfloat16Product& p);

// Whether bfloat16 products may use the primitive: yes, unless ONNXTRAIN_BF16_PRODUCT=gemm (for
// measuring against oneDNN's bfloat16 GEMM alone).
bool bfloat16_primitives_enabled();

// Primitives kept (least recently used evicted first), for tests and statistics.
size_t bfloat16_matmul_primitives_kept();

}  // namespace onnxtrain
