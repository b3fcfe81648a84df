#pragma once
// The absolute terms of the batch-normalization outputs that the absolute-input run cannot give
// (xhat is not |xhat|), so that the audit judges them as sums of terms (audit_compare.h): each
// formula bounds, to first order, the rounding of a float32 kernel's operations with every
// intermediate replaced by its own terms. The mean's terms are mean(|x|) (a saved mean is read:
// |mean|), xhat = (x - mean) * inv_std has the terms (|x| + mean's terms) * inv_std, and
// statistics computed from X carry inv_std's error (batch_norm_terms.cc).
//
// Why it matters: a channel of two values (a batch of 2 on a 1x1 map, as the last BatchNorms of
// the mobile CNNs see at small inputs) with a variance below epsilon has inv_std near
// 1/sqrt(epsilon); the kernels' x * a_c + d_c then cancels terms hundreds of times larger than Y,
// as PyTorch's CPU kernel does. Judged against max |Y| that rounding read as a 1e-4 kernel error.
//
// Every function takes float64 tensors; X is [N, C, ...] and dY has its shape. The batch
// statistics are the saved ones when given, else computed from X (population variance + epsilon).
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace onnxtrain::audit {

// Whether output `index` of `node` has terms of its own formula here.
bool has_batch_norm_terms(const Node& node, size_t index);

// The terms of that output, from the node's float64 inputs (`wide_inputs`).
Tensor batch_norm_terms(const Node& node, size_t index, const std::vector<Tensor>& wide_inputs);

// BatchNormTraining's Y = a_c * x + (B_c - a_c * mean_c), a_c = scale_c * inv_std_c, per element:
// |a_c| * (|x| + mean_c|x| + |x - mean_c| * r_c) + |B_c|, r_c inv_std's relative error per unit.
Tensor batch_norm_output_terms(const Tensor& x, const Tensor& scale, const Tensor& bias, double epsilon);

// Training-mode BatchNormGrad's dX = k_c * (dY - mean_c(dY) - xhat * mean_c(dY * xhat)), k_c =
// scale_c * inv_std_c: |k_c| * (|dY| + mean_c|dY| + T * mean_c(|dY| * T)) with T the terms of xhat
// (and k_c's own error when the statistics are recomputed).
Tensor batch_norm_input_grad_terms(const Tensor& dy, const Tensor& x, const Tensor& scale, const Tensor& saved_mean,
                                   const Tensor& saved_inv_std, double epsilon);

// Training-mode BatchNormGrad's dscale = sum_c(dY * xhat): inv_std_c * sum_c(|dY| * |X - mean_c|)
// per channel (the sum itself is accumulated from exact differences of float64 X).
Tensor batch_norm_scale_grad_terms(const Tensor& dy, const Tensor& x, const Tensor& saved_mean,
                                   const Tensor& saved_inv_std, double epsilon);

}  // namespace onnxtrain::audit
