#pragma once
// The API a gradient rule sees. A rule reads its forward node, asks for forward values by name
// (using one in a backward node is what saves it for backward) and emits ONNX-style nodes.
//
//   void mul_gradient(GradBuilder& g) {
//     if (g.needs_input_grad(0))
//       g.set_input_grad(0, g.reduce_to_input_shape(g.op("Mul", {g.output_grad(0), g.input(1)}), 0));
//     ...
//   }
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {

class GradientGraphBuilder;

class GradBuilder {
 public:
  GradBuilder(GradientGraphBuilder& owner, const Node& node, std::vector<std::string> output_grads,
              std::vector<bool> needs_input_grad);

  const Node& node() const { return node_; }
  int opset() const;
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  int num_outputs() const { return static_cast<int>(node_.outputs.size()); }
  // Forward values: inputs and outputs of the node.
  const std::string& input(int i) const;
  const std::string& output(int i) const;
  bool has_input(int i) const { return node_.has_input(static_cast<size_t>(i)); }

  bool has_output_grad(int i) const;
  const std::string& output_grad(int i) const;  // throws when no gradient reaches output i
  // The gradient of output i, or zeros shaped like it when nothing flows back into it.
  std::string output_grad_or_zeros(int i);

  bool needs_input_grad(int i) const;
  void set_input_grad(int i, const std::string& grad);
  // Input i receives no gradient from this node, as when a PyTorch Function's backward returns
  // None for it: nothing is added to its sum, and a value reached by no other path keeps None.
  void set_no_input_grad(int i);
  bool has_no_input_grad(int i) const;
  const std::vector<std::string>& input_grads() const { return input_grads_; }

  // Emits a node; returns the name of its (first) output.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs,
                 const AttributeMap& attrs = {}, const std::string& domain = kOnnxDomain);
  // Outputs i with produced[i] false (when given) stay unnamed, so the kernel skips them.
  std::vector<std::string> op_multi(const std::string& op_type, const std::vector<std::string>& inputs,
                                    int num_outputs, const AttributeMap& attrs = {},
                                    const std::string& domain = kOnnxDomain,
                                    const std::vector<bool>& produced = {});

  // Zeros shaped like `value` (a forward value: its shape is taken in the forward part), of
  // `value`'s element type or the one given.
  std::string zeros_like(const std::string& value, DType dtype = DType::Undefined);

  // Constants.
  std::string scalar_like(double value, const std::string& like);  // 0-d, like's element type
  std::string int64s(const std::vector<int64_t>& values);          // 1-D int64

  // Shape(value), placed in the forward part so backward keeps only the small shape tensor.
  std::string shape_of(const std::string& value);
  // Sums `grad`, shaped like output 0, down to the broadcast shape of input i; emits nothing
  // when the declared shapes provably match.
  std::string reduce_to_input_shape(const std::string& grad, int input_index);

  // Declares the element type of an emitted value, for ops whose output type is not their first
  // input's (the emitter guesses that, and knows Shape, Cast and comparisons).
  void set_dtype(const std::string& value, DType dtype);
  DType dtype_of(const std::string& value) const;
  const ValueInfo* info(const std::string& value) const;

 private:
  GradientGraphBuilder& owner_;
  const Node& node_;
  std::vector<std::string> output_grads_;
  std::vector<bool> needs_input_grad_;
  std::vector<std::string> input_grads_;
  std::vector<bool> no_input_grad_;
};

}  // namespace onnxtrain
