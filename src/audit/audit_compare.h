#pragma once
// How the numerics audit measures one output of a node against its float64 twin, per op family.
//
//   SumOfTerms   ops whose every output element is a sum of products of input elements with
//                positive coefficients (MatMul, Gemm, Conv and its gradients, reductions by sum or
//                mean, average pooling, Add, Sum). Error of element e: |out32 - out64| / S_e,
//                where S_e is the same node run in float64 on the absolute values of its float
//                inputs: the sum of the absolute terms of e. Rounding in a float32 sum of k terms
//                is bounded by k * 2^-24 * S_e, so cancellation (a gradient that is zero in exact
//                arithmetic, as a bias before BatchNorm has) cannot read as a failure, and a
//                small element is still judged on its own terms. rel_error: the max over e.
//                Also the per-channel sums among the normalizations' outputs: BatchNorm's batch
//                means (running and saved; the same trick applies) and, in training-mode
//                BatchNormGrad, dB = sum(dY) (likewise) and dscale = sum(dY * xhat); and
//                BatchNormTraining's Y and training BatchNormGrad's dX. The last three have terms
//                of their own formula (batch_norm_terms.h).
//   OutputScale  every other floating output (elementwise ops, activations, normalization,
//                softmax, losses, data movement): max |out32 - out64| / max |out64|.
//   Exact        integer and bool outputs (shapes, masks, Dropout's mask): rel_error is the
//                fraction of elements that differ, so 0 when equal and 1 when all differ.
//   SelectedValue index outputs of decisions (ArgMax/ArgMin, TopK's and MaxPool's indices): an
//                index is judged by the input value it selects, max |x[i32] - x[i64]| / max |x|.
//                Both sides see the same input values (float32 to float64 is exact), so a tie
//                between equal candidates picks the same value whichever index wins and costs 0.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace onnxtrain::audit {

enum class ErrorScale { SumOfTerms, OutputScale, Exact, SelectedValue };

const char* error_scale_name(ErrorScale scale);

// The family of output `index` of `node`.
ErrorScale error_scale_of(const Node& node, size_t index, DType output_dtype);

// The rounding step of a float type: the distance from 1 to the next value (2^-23 for float32,
// 2^-7 for bfloat16, 2^-10 for float16, 2^-52 for float64); 0 for other types. A correctly rounded
// result is within half a step of the exact one, relative to its magnitude.
double rounding_step(DType dtype);

// A copy of `t` as float64 (float16, bfloat16, float32 and float64; integers and bool pass as they
// are, since kernels read them as indices and shapes).
Tensor widen_to_float64(const Tensor& t);
// The elementwise absolute value of a float64 tensor; other tensors pass as they are.
Tensor absolute(const Tensor& t);

// rel_error of one output, per the families above. `terms` is the twin's output on absolute
// inputs (SumOfTerms only); `selected_from` is the input the indices index (SelectedValue only),
// with `axis` the dimension they index, or -1 for MaxPool's flat indices into the whole input.
double output_error(ErrorScale scale, const Tensor& engine, const Tensor& twin, const Tensor& terms = Tensor(),
                    const Tensor& selected_from = Tensor(), int axis = -1);

}  // namespace onnxtrain::audit
