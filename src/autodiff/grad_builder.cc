#include "autodiff/grad_builder.h"

#include "autodiff/gradient_graph.h"
#include "core/half.h"

namespace onnxtrain {

GradBuilder::GradBuilder(GradientGraphBuilder& owner, const Node& node,
                         std::vector<std::string> output_grads, std::vector<bool> needs_input_grad)
    : owner_(owner),
      node_(node),
      output_grads_(std::move(output_grads)),
      needs_input_grad_(std::move(needs_input_grad)),
      input_grads_(node.inputs.size()),
      no_input_grad_(node.inputs.size(), false) {}

int GradBuilder::opset() const { return owner_.graph().opset(node_.domain); }

const std::string& GradBuilder::input(int i) const {
  OT_CHECK(has_input(i), node_.describe(), ": gradient rule asked for missing input ", i);
  return node_.inputs[static_cast<size_t>(i)];
}

const std::string& GradBuilder::output(int i) const {
  OT_CHECK(i >= 0 && i < num_outputs() && !node_.outputs[static_cast<size_t>(i)].empty(),
           node_.describe(), ": gradient rule asked for missing output ", i);
  return node_.outputs[static_cast<size_t>(i)];
}

bool GradBuilder::has_output_grad(int i) const {
  return i >= 0 && i < static_cast<int>(output_grads_.size()) && !output_grads_[static_cast<size_t>(i)].empty();
}

const std::string& GradBuilder::output_grad(int i) const {
  OT_CHECK(has_output_grad(i), node_.describe(), ": no gradient reaches output ", i);
  return output_grads_[static_cast<size_t>(i)];
}

std::string GradBuilder::output_grad_or_zeros(int i) {
  if (has_output_grad(i)) return output_grad(i);
  return zeros_like(output(i));
}

std::string GradBuilder::zeros_like(const std::string& value, DType dtype) {
  Tensor zero = Tensor::zeros(dtype == DType::Undefined ? dtype_of(value) : dtype, {1});
  AttributeMap attrs{{"value", Attribute::of_tensor(zero)}};
  std::string z = op("ConstantOfShape", {shape_of(value)}, attrs);
  owner_.graph().info_mut(z).dtype = zero.dtype();
  return z;
}

bool GradBuilder::needs_input_grad(int i) const {
  return i >= 0 && i < static_cast<int>(needs_input_grad_.size()) && needs_input_grad_[static_cast<size_t>(i)];
}

void GradBuilder::set_input_grad(int i, const std::string& grad) {
  OT_CHECK(needs_input_grad(i), node_.describe(), ": gradient rule set a gradient for input ", i,
           ", which does not need one");
  input_grads_[static_cast<size_t>(i)] = grad;
}

void GradBuilder::set_no_input_grad(int i) {
  OT_CHECK(needs_input_grad(i), node_.describe(), ": gradient rule declared no gradient for input ", i,
           ", which does not need one");
  no_input_grad_[static_cast<size_t>(i)] = true;
}

bool GradBuilder::has_no_input_grad(int i) const {
  return i >= 0 && i < static_cast<int>(no_input_grad_.size()) && no_input_grad_[static_cast<size_t>(i)];
}

std::string GradBuilder::op(const std::string& op_type, const std::vector<std::string>& inputs,
                            const AttributeMap& attrs, const std::string& domain) {
  return op_multi(op_type, inputs, 1, attrs, domain)[0];
}

std::vector<std::string> GradBuilder::op_multi(const std::string& op_type, const std::vector<std::string>& inputs,
                                               int num_outputs, const AttributeMap& attrs,
                                               const std::string& domain, const std::vector<bool>& produced) {
  owner_.set_origin(&node_);
  return owner_.emit(op_type, domain, inputs, num_outputs, attrs, op_type, produced);
}

std::string GradBuilder::scalar_like(double value, const std::string& like) {
  DType dt = dtype_of(like);
  if (is_16bit_float(dt)) {
    Tensor h = Tensor::empty(dt, {});
    *static_cast<uint16_t*>(h.raw_data()) = dt == DType::Float16 ? double_to_half(value).bits : double_to_bfloat16(value).bits;
    return owner_.add_constant(node_.name + "_const", h);
  }
  Tensor t = dispatch_numeric(dt, "scalar_like", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor::scalar<T>(static_cast<T>(value));
  });
  return owner_.add_constant(node_.name + "_const", t);
}

std::string GradBuilder::int64s(const std::vector<int64_t>& values) {
  return owner_.add_constant(node_.name + "_const",
                             Tensor::from_vector(values, {static_cast<int64_t>(values.size())}));
}

std::string GradBuilder::shape_of(const std::string& value) {
  // A fully static shape is a constant: nothing to compute and nothing to stash.
  const ValueInfo* vi = info(value);
  if (vi && vi->shape) {
    std::vector<int64_t> dims;
    for (const Dim& d : *vi->shape) {
      if (!d.is_static()) break;
      dims.push_back(d.value);
    }
    if (dims.size() == vi->shape->size()) return int64s(dims);
  }
  return op("Shape", {value});
}

std::string GradBuilder::reduce_to_input_shape(const std::string& grad, int input_index) {
  // `grad` is shaped like the node's output 0: that is what broadcasting produced.
  const ValueInfo* in = info(input(input_index));
  const ValueInfo* out = info(output(0));
  if (in && out && in->shape && out->shape && *in->shape == *out->shape) {
    bool all_known = true;
    for (const Dim& d : *in->shape) all_known = all_known && (d.is_static() || !d.symbol.empty());
    if (all_known) return grad;
  }
  std::string reduced = op("ReduceSumTo", {grad, shape_of(input(input_index))}, {}, kOnnxTrainDomain);
  if (in) owner_.graph().info_mut(reduced) = *in;
  return reduced;
}

void GradBuilder::set_dtype(const std::string& value, DType dtype) { owner_.graph().info_mut(value).dtype = dtype; }

DType GradBuilder::dtype_of(const std::string& value) const {
  const ValueInfo* vi = info(value);
  OT_CHECK(vi && vi->dtype != DType::Undefined, node_.describe(), ": the element type of '", value,
           "' is unknown, so its gradient cannot be built");
  return vi->dtype;
}

const ValueInfo* GradBuilder::info(const std::string& value) const { return owner_.graph().info(value); }

}  // namespace onnxtrain
