#include <unordered_set>

#include "opdef/op_registry.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

// Larger results stay computed at run time: a folded constant lives as long as the program.
constexpr int64_t kMaxFoldedElements = 1 << 16;

bool foldable_op(const Node& n) {
  if (is_unrepeatable_op(n)) return false;
  for (const auto& kv : n.attrs)
    if (kv.second.kind == Attribute::Kind::Graph) return false;
  return true;
}

// Runs one node on constant inputs with the engine's kernels; false when its result is too large
// or its kernel refuses (the node then stays, and the error surfaces at run time as usual).
bool evaluate(const Graph& graph, const Node& node, std::vector<Tensor>& outputs) {
  Graph g;
  g.opsets = graph.opsets;
  for (const auto& in : node.inputs)
    if (!in.empty() && !g.is_initializer(in)) g.add_initializer(in, graph.initializers.at(in));
  for (const auto& out : node.outputs)
    if (!out.empty()) g.outputs.push_back(out);
  g.nodes.push_back(node);
  try {
    Program program(std::move(g));
    RunState state(program, 0, ThreadPool::global());
    execute(state, 0, program.nodes().size(), "folding");
    outputs.clear();
    for (const auto& out : program.graph().outputs) {
      Tensor t = state.values[static_cast<size_t>(program.value_id(out))];
      if (!t.defined() || t.numel() > kMaxFoldedElements) return false;
      outputs.push_back(t.clone());
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The declared dims of `value`, -1 where not static; empty when the rank is unknown.
std::vector<int64_t> static_dims(const Graph& graph, const std::string& value) {
  const ValueInfo* vi = graph.info(value);
  std::vector<int64_t> dims;
  if (!vi || !vi->shape) return dims;
  for (const Dim& d : *vi->shape) dims.push_back(d.is_static() ? d.value : -1);
  return dims;
}

// Shape(x)[start:end] (opset 15's attributes) when every selected dim is static.
bool fold_shape(const Graph& graph, const Node& n, Tensor& out) {
  std::vector<int64_t> dims = static_dims(graph, n.inputs[0]);
  if (dims.empty() && !(graph.info(n.inputs[0]) && graph.info(n.inputs[0])->shape)) return false;
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto clamp = [rank](int64_t i) { return std::min(std::max(i < 0 ? i + rank : i, int64_t{0}), rank); };
  const int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  std::vector<int64_t> picked;
  for (int64_t i = start; i < end; ++i) {
    if (dims[static_cast<size_t>(i)] < 0) return false;
    picked.push_back(dims[static_cast<size_t>(i)]);
  }
  out = Tensor::from_vector(picked, {static_cast<int64_t>(picked.size())});
  return true;
}

// Gather(Shape(x), indices) along axis 0 when the gathered dims of x are static.
bool fold_gather_of_shape(const Graph& graph, const std::unordered_map<std::string, const Node*>& producer,
                          const Node& n, Tensor& out) {
  if (n.attr_int("axis", 0) != 0 || !graph.is_initializer(n.inputs[1])) return false;
  auto it = producer.find(n.inputs[0]);
  if (it == producer.end() || it->second->op_type != "Shape" || !it->second->domain.empty() ||
      it->second->has_attr("start") || it->second->has_attr("end"))
    return false;
  const std::vector<int64_t> dims = static_dims(graph, it->second->inputs[0]);
  if (dims.empty()) return false;
  const Tensor& indices = graph.initializers.at(n.inputs[1]);
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32) return false;
  std::vector<int64_t> picked;
  const int64_t rank = static_cast<int64_t>(dims.size());
  for (int64_t i : indices.to_int64_vector()) {
    if (i < -rank || i >= rank) return false;
    const int64_t d = dims[static_cast<size_t>(i < 0 ? i + rank : i)];
    if (d < 0) return false;
    picked.push_back(d);
  }
  out = Tensor::from_vector(picked, indices.shape());
  return true;
}

}  // namespace

bool fold_constants(Graph& graph) {
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());
  std::unordered_map<std::string, const Node*> producer;
  bool changed = false;
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  // Nodes are visited in order, so a folded result is already an initializer when its consumers
  // are looked at.
  for (Node& n : graph.nodes) {
    bool visible = false;
    for (const auto& out : n.outputs) visible = visible || graph_outputs.count(out);
    std::vector<Tensor> outs;
    bool folded = false;
    if (!visible && foldable_op(n) && n.domain.empty()) {
      Tensor t;
      if (n.op_type == "Shape" && fold_shape(graph, n, t)) {
        outs = {t};
        folded = true;
      } else if (n.op_type == "Gather" && fold_gather_of_shape(graph, producer, n, t)) {
        outs = {t};
        folded = true;
      }
    }
    if (!folded && !visible && foldable_op(n)) {
      bool all_constant = true;
      for (const auto& in : n.inputs) all_constant = all_constant && (in.empty() || graph.is_initializer(in));
      folded = all_constant && evaluate(graph, n, outs);
    }
    if (!folded) {
      kept.push_back(std::move(n));  // reserved above: pointers into `kept` stay valid
      for (const auto& out : kept.back().outputs)
        if (!out.empty()) producer[out] = &kept.back();
      continue;
    }
    size_t next = 0;
    for (const auto& out : n.outputs)
      if (!out.empty()) graph.add_initializer(out, outs[next++]);
    changed = true;
  }
  graph.nodes = std::move(kept);
  return changed;
}

}  // namespace onnxtrain
