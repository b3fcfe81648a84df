#include <unordered_set>

#include "passes/passes.h"

namespace onnxtrain {

bool eliminate_dead_nodes(Graph& graph) {
  std::unordered_set<std::string> needed(graph.outputs.begin(), graph.outputs.end());
  std::vector<bool> keep(graph.nodes.size(), false);
  bool changed = false;
  for (size_t k = graph.nodes.size(); k-- > 0;) {
    const Node& n = graph.nodes[k];
    for (const auto& out : n.outputs)
      if (!out.empty() && needed.count(out)) keep[k] = true;
    if (!keep[k]) {
      changed = true;
      continue;
    }
    for (const auto& in : n.inputs)
      if (!in.empty()) needed.insert(in);
  }
  if (changed) {
    std::vector<Node> live;
    live.reserve(graph.nodes.size());
    for (size_t k = 0; k < graph.nodes.size(); ++k)
      if (keep[k]) live.push_back(std::move(graph.nodes[k]));
    graph.nodes = std::move(live);
  }
  std::vector<std::string> order;
  for (const auto& name : graph.initializer_order) {
    if (needed.count(name) || graph.is_input(name)) {
      order.push_back(name);
    } else {
      graph.initializers.erase(name);
      changed = true;
    }
  }
  graph.initializer_order = std::move(order);
  return changed;
}

}  // namespace onnxtrain
