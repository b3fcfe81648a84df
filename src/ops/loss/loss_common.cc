#include "ops/loss/loss_common.h"

namespace onnxtrain {

LossReduction parse_loss_reduction(const Node& node) {
  const std::string r = node.attr_string("reduction", "mean");
  if (r == "none") return LossReduction::None;
  if (r == "sum") return LossReduction::Sum;
  if (r == "mean") return LossReduction::Mean;
  OT_THROW(node.describe(), ": attribute 'reduction' is '", r, "', expected 'none', 'sum' or 'mean'");
}

const char* loss_reduction_name(LossReduction r) {
  switch (r) {
    case LossReduction::None: return "none";
    case LossReduction::Sum: return "sum";
    default: return "mean";
  }
}

LossAttrs::LossAttrs(const Node& node)
    : reduction(parse_loss_reduction(node)),
      has_ignore(node.has_attr("ignore_index")),
      ignore_index(node.attr_int("ignore_index", 0)) {}

AttributeMap LossAttrs::attrs() const {
  AttributeMap a{{"reduction", Attribute::of_string(loss_reduction_name(reduction))}};
  if (has_ignore) a["ignore_index"] = Attribute::of_int(ignore_index);
  return a;
}

LossLabels::LossLabels(const Tensor& labels, bool has_ignore, int64_t ignore_index, int64_t classes,
                       const char* what)
    : has_ignore_(has_ignore), ignore_(ignore_index), classes_(classes), what_(what) {
  if (labels.dtype() == DType::Int64) p64_ = labels.data<int64_t>();
  else if (labels.dtype() == DType::Int32) p32_ = labels.data<int32_t>();
  else OT_THROW(what, ": the labels must be int32 or int64, got ", labels.str());
}

void LossLabels::throw_out_of_range(int64_t i, int64_t t) const {
  OT_THROW(what_, ": label ", t, " at position ", i, " is outside [0, ", classes_, ")",
           has_ignore_ ? str_cat(" and is not ignore_index ", ignore_) : std::string(" (no ignore_index is set)"));
}

AxisSplit loss_layout(const TensorShape& input, const TensorShape& labels, const char* what) {
  OT_CHECK(input.rank() >= 2, what, ": the input must be [N, C] or [N, C, d1, ...], got ", input.str());
  bool ok = labels.rank() == input.rank() - 1 && labels[0] == input[0];
  for (int d = 2; ok && d < input.rank(); ++d) ok = labels[d - 1] == input[d];
  OT_CHECK(ok, what, ": the labels ", labels.str(), " must have the input's shape ", input.str(),
           " without its class dim 1");
  return split_at_axis(input, 1);
}

TensorShape loss_shape(LossReduction r, const TensorShape& labels) {
  return r == LossReduction::None ? labels : TensorShape{};
}

void check_loss_weights(const Tensor& weights, DType dtype, int64_t classes, const char* what) {
  OT_CHECK(weights.rank() == 1 && weights.dim(0) == classes, what, ": the weights must be 1-D with one value per class (",
           classes, "), got ", weights.str());
  OT_CHECK(weights.dtype() == dtype, what, ": the weights ", weights.str(), " must have the input's element type ",
           dtype_name(dtype));
}

LossForward begin_loss_forward(KernelContext& ctx, const LossAttrs& attrs, const char* what) {
  const Tensor& input = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const AxisSplit split = loss_layout(input.shape(), labels.shape(), what);
  const Tensor* weights = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (weights) check_loss_weights(*weights, input.dtype(), split.n, what);
  return {input,
          labels,
          split,
          weights,
          LossLabels(labels, attrs.has_ignore, attrs.ignore_index, split.n, what),
          ctx.allocate_output(0, input.dtype(), loss_shape(attrs.reduction, labels.shape()))};
}

}  // namespace onnxtrain
