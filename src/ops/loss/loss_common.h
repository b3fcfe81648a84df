#pragma once
// What NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss share: the reduction attribute,
// the [N, C, d1..dk] / [N, d1..dk] layout, label access with ignore_index, and the per-position
// class weights that the "mean" reduction divides by.
#include <string>

#include "core/tensor.h"
#include "ir/graph.h"
#include "opdef/kernel.h"
#include "ops/common/reduce.h"

namespace onnxtrain {

enum class LossReduction { None, Sum, Mean };

LossReduction parse_loss_reduction(const Node& node);
const char* loss_reduction_name(LossReduction r);

// The attributes both losses have, parsed once.
struct LossAttrs {
  LossReduction reduction;
  bool has_ignore;
  int64_t ignore_index;

  explicit LossAttrs(const Node& node);
  // As the gradient rules hand them to the backward ops.
  AttributeMap attrs() const;
};

// Class labels (int32 or int64) with the optional ignore_index.
class LossLabels {
 public:
  LossLabels(const Tensor& labels, bool has_ignore, int64_t ignore_index, int64_t classes, const char* what);
  // The class at position i, or -1 when it is ignored; throws when it is out of [0, C).
  int64_t at(int64_t i) const {
    const int64_t t = p64_ ? p64_[i] : p32_[i];
    if (has_ignore_ && t == ignore_) return -1;
    if (t < 0 || t >= classes_) throw_out_of_range(i, t);
    return t;
  }

 private:
  [[noreturn]] void throw_out_of_range(int64_t i, int64_t t) const;
  const int64_t* p64_ = nullptr;
  const int32_t* p32_ = nullptr;
  bool has_ignore_;
  int64_t ignore_;
  int64_t classes_;
  const char* what_;
};

// scores/input [N, C, d1..dk] against labels [N, d1..dk]: outer = N, n = C, inner = d1*..*dk.
AxisSplit loss_layout(const TensorShape& input, const TensorShape& labels, const char* what);

// The loss output's shape: the labels' for "none", a scalar otherwise.
TensorShape loss_shape(LossReduction r, const TensorShape& labels);

// Checks the optional class weights: 1-D of C values of the input's element type.
void check_loss_weights(const Tensor& weights, DType dtype, int64_t classes, const char* what);

// What both forward kernels read first, checked against each other: scores or log-probabilities
// [N, C, d1..dk] (input 0), labels (input 1), the optional class weights (input 2); and the loss
// (output 0), allocated.
struct LossForward {
  const Tensor& input;
  const Tensor& label_tensor;
  AxisSplit split;
  const Tensor* weights;
  LossLabels labels;
  Tensor& loss;
};
LossForward begin_loss_forward(KernelContext& ctx, const LossAttrs& attrs, const char* what);

// The denominator of "mean": the sum of the weights of the labels not ignored (their count
// without weights). Also validates every label.
template <typename T>
double loss_mean_denominator(const LossLabels& labels, int64_t positions, const T* weights) {
  double total = 0;
  for (int64_t i = 0; i < positions; ++i) {
    const int64_t t = labels.at(i);
    if (t >= 0) total += weights ? static_cast<double>(weights[t]) : 1.0;
  }
  return total;
}

}  // namespace onnxtrain
