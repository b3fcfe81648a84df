// An If whose condition folding made constant runs one branch on every call: its nodes move into
// the graph in the If's place, so that the other passes (and the memory plan) see through it.
// The branch's inputs are outer values under the same names (onnx/subgraph_closure.h), and ONNX
// keeps names unique across scopes, so the nodes move as they are; Identities keep the If's
// output names.
#include "passes/passes.h"

namespace onnxtrain {
namespace {

const Tensor* constant_condition(const Graph& graph, const Node& n,
                                 const std::unordered_map<std::string, size_t>& producers) {
  if (n.inputs.empty()) return nullptr;
  const std::string& cond = n.inputs[0];
  if (graph.is_initializer(cond)) return &graph.initializers.at(cond);
  auto it = producers.find(cond);
  if (it == producers.end()) return nullptr;
  const Node& p = graph.nodes[it->second];
  if (p.domain.empty() && p.op_type == "Constant" && p.has_attr("value") &&
      p.attrs.at("value").kind == Attribute::Kind::Tensor)
    return &p.attrs.at("value").t;
  return nullptr;
}

}  // namespace

bool inline_constant_ifs(Graph& graph) {
  const auto producers = graph.producers();
  std::vector<Node> nodes;
  bool changed = false;
  for (const Node& n : graph.nodes) {
    const Tensor* cond = n.domain == kOnnxTrainDomain && n.op_type == "If" ? constant_condition(graph, n, producers) : nullptr;
    if (!cond || cond->numel() != 1 || cond->is_list()) {
      nodes.push_back(n);
      continue;
    }
    const Graph& branch = *n.attrs.at(cond->item_as_double() != 0 ? "then_branch" : "else_branch").g;
    // Names the loader made inside the body (Identities for pass-through outputs) are unique only
    // there: a clash with an outer name keeps the If.
    bool clash = false;
    for (const Node& inner : branch.nodes)
      for (const auto& out : inner.outputs) clash = clash || producers.count(out) || graph.is_input(out) || graph.is_initializer(out);
    if (clash) {
      nodes.push_back(n);
      continue;
    }
    for (const auto& name : branch.initializer_order) graph.add_initializer(name, branch.initializers.at(name));
    for (const auto& [name, info] : branch.value_info)
      if (!graph.value_info.count(name)) graph.value_info[name] = info;
    for (const Node& inner : branch.nodes) nodes.push_back(inner);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      Node id;
      id.op_type = "Identity";
      id.name = n.outputs[i];
      id.inputs = {branch.outputs[i]};
      id.outputs = {n.outputs[i]};
      nodes.push_back(std::move(id));
    }
    changed = true;
  }
  if (changed) graph.nodes = std::move(nodes);
  return changed;
}

}  // namespace onnxtrain
