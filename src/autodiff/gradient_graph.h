#pragma once
// Reverse-mode gradient construction over a forward graph: the result is one joint graph,
// forward nodes first, then the backward nodes the gradient rules emitted.
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {

struct GradientSpec {
  // Graph inputs to differentiate with respect to (trainable parameters, inputs requiring grad).
  std::vector<std::string> wrt;
  // Graph outputs whose gradients come from outside (the caller's loss).
  std::vector<std::string> outputs_with_grad;
};

struct GradientGraph {
  Graph joint;
  size_t num_forward_nodes = 0;
  // Outputs that actually depend on `wrt` through differentiable ops, and the joint-graph input
  // that carries each one's incoming gradient (parallel vectors).
  std::vector<std::string> differentiable_outputs;
  std::vector<int> differentiable_output_positions;  // index into the forward graph's outputs
  std::vector<std::string> output_grad_inputs;
  // Parallel to spec.wrt: the joint-graph output holding each gradient, "" when no gradient
  // reaches that value (PyTorch leaves .grad as None then).
  std::vector<std::string> wrt_grads;
  // Parallel to spec.wrt: indices into differentiable_outputs of the outputs that depend on it.
  // When none of them receives a gradient, PyTorch leaves the value's .grad as None.
  std::vector<std::vector<int>> wrt_output_dependencies;
};

GradientGraph build_gradient_graph(const Graph& forward, const GradientSpec& spec);

// Builder state shared by the GradBuilder of every node: the graph being extended.
class GradientGraphBuilder {
 public:
  explicit GradientGraphBuilder(Graph& graph) : graph_(graph) {}
  Graph& graph() { return graph_; }
  const Graph& graph() const { return graph_; }
  // Emits a node; `base` seeds the names of its outputs.
  // Outputs i with produced[i] false (when `produced` is given) are left unnamed: the kernel
  // skips them, as for an unused optional output.
  std::vector<std::string> emit(const std::string& op_type, const std::string& domain,
                                const std::vector<std::string>& inputs, int num_outputs,
                                const AttributeMap& attrs, const std::string& base,
                                const std::vector<bool>& produced = {});
  std::string add_constant(const std::string& base, Tensor value);
  // Sums a list of gradient contributions into one value (the single fan-out helper).
  std::string accumulate(const std::vector<std::string>& contributions, const std::string& base);
  void set_origin(const Node* node) { origin_ = node; }

 private:
  Graph& graph_;
  const Node* origin_ = nullptr;  // forward node whose rule is running, for naming
};

}  // namespace onnxtrain
