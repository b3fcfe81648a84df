#pragma once
// Batched matrix products with numpy broadcasting over the leading dims, shared by MatMul,
// FusedMatMul and the attention kernels.
#include "opdef/kernel.h"

namespace onnxtrain {

// Output shape of op(a) @ op(b) following numpy.matmul (1-D operands promoted and dropped).
TensorShape matmul_shape(const TensorShape& a, const TensorShape& b, bool trans_a, bool trans_b, const char* what);

// out = alpha * op(a) @ op(b) (+ bias, a [N] or [1] row added to every output row, written
// before the product so that the GEMM adds into it: no second pass over the output). `out` is
// already allocated with matmul_shape.
void matmul(ThreadPool& pool, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, Tensor& out,
            const Tensor* bias = nullptr);

}  // namespace onnxtrain
