#pragma once
// onnxtrain's graph IR: ONNX-shaped (values are named, nodes list input and output names) so
// that loading, gradient building and saving stay one-to-one with ONNX.
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/attribute.h"

namespace onnxtrain {

inline constexpr const char* kOnnxDomain = "";
// Ops that only onnxtrain defines (gradient kernels, fused forms) live in their own domain.
inline constexpr const char* kOnnxTrainDomain = "ai.onnxtrain";

// One dimension of a declared shape: a number, a named symbol (e.g. "batch"), or unknown.
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim& o) const {
    if (is_static() || o.is_static()) return value == o.value;
    return !symbol.empty() && symbol == o.symbol;
  }
};

struct ValueInfo {
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> shape;  // nullopt: rank unknown
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an unrequested optional output
  AttributeMap attrs;
  // Training graphs: the node was emitted by a gradient rule and runs after the yield point.
  // Passes keep it: they fuse forward nodes with forward nodes and backward with backward only.
  bool in_backward = false;
  // Training graphs, forward nodes: backward recomputes this node's outputs instead of stashing
  // them (a torch.utils.checkpoint segment; passes/recompute.cc).
  bool recompute = false;

  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> fallback = {}) const;
  std::vector<std::string> attr_strings(const std::string& key, std::vector<std::string> fallback = {}) const;
  // "Relu node 'layer1/relu'": how errors name a node.
  std::string describe() const;
};

class Graph {
 public:
  std::string name = "graph";
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Node> nodes;  // kept in a valid execution order
  std::unordered_map<std::string, Tensor> initializers;
  std::vector<std::string> initializer_order;  // for stable saving
  std::unordered_map<std::string, ValueInfo> value_info;
  std::unordered_map<std::string, int> opsets = {{kOnnxDomain, 17}};

  int opset(const std::string& domain = kOnnxDomain) const;
  const ValueInfo* info(const std::string& value) const;
  // True unless the value is declared with a non-floating element type: unknown types may carry
  // gradients, and the rules' dtype checks report real problems.
  bool may_be_floating(const std::string& value) const;
  ValueInfo& info_mut(const std::string& value) { return value_info[value]; }

  void add_initializer(const std::string& value, Tensor t);
  bool is_initializer(const std::string& value) const { return initializers.count(value) != 0; }
  bool is_input(const std::string& value) const;

  // A name not used anywhere in the graph yet, derived from `base`.
  std::string unique_name(const std::string& base);
  // Appends a node and returns its index; output names must be fresh.
  size_t add_node(Node node);
  // Removes the nodes whose flag is set, keeping the others in order.
  void remove_nodes(const std::vector<bool>& removed);

  // Node index producing each value (graph inputs and initializers are absent).
  std::unordered_map<std::string, size_t> producers() const;
  // Indices of nodes consuming each value, in node order.
  std::unordered_map<std::string, std::vector<size_t>> consumers() const;
  // The names the nodes' subgraphs (If branches, Loop bodies, at any depth) read or output: a
  // pass that renames or retypes a value must leave these alone.
  std::unordered_set<std::string> names_read_by_subgraphs() const;

  // Reorders nodes topologically (stable for already ordered graphs) and checks that every
  // input is defined. Throws naming the first dangling value or cycle.
  void sort_topologically();

 private:
  void collect_names();
  std::unordered_set<std::string> used_names_;
  bool names_collected_ = false;
  size_t name_counter_ = 0;
};

}  // namespace onnxtrain
