#pragma once
// Batched matrix products with numpy broadcasting over the leading dims, shared by MatMul,
// FusedMatMul and the attention kernels.
#include "ops/kernel.h"

namespace onnxtrain {

// Output shape of op(a) @ op(b) following numpy.matmul (1-D operands promoted and dropped).
TensorShape matmul_shape(const TensorShape& a, const TensorShape& b, bool trans_a, bool trans_b, const char* what);

// out = alpha * op(a) @ op(b); `out` is already allocated with matmul_shape.
void matmul(ThreadPool& pool, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, Tensor& out);

}  // namespace onnxtrain
