#include "passes/partition.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace onnxtrain {
namespace {

bool is_shape_query(const Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }

// Indices of the nodes that some graph output depends on, in their original order.
std::vector<size_t> live_nodes(const Graph& g) {
  std::unordered_set<std::string> needed(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    for (const auto& out : n.outputs)
      if (!out.empty() && needed.count(out)) keep[k] = true;
    if (!keep[k]) continue;
    for (const auto& in : n.inputs)
      if (!in.empty()) needed.insert(in);
  }
  std::vector<size_t> out;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (keep[k]) out.push_back(k);
  return out;
}

Graph subgraph(const Graph& joint, size_t begin, size_t end, std::vector<std::string> inputs,
               std::vector<std::string> outputs, const std::string& name) {
  Graph g;
  g.name = name;
  g.opsets = joint.opsets;
  g.inputs = std::move(inputs);
  g.outputs = std::move(outputs);
  std::unordered_set<std::string> used;
  for (size_t k = begin; k < end; ++k) {
    g.nodes.push_back(joint.nodes[k]);
    for (const auto& v : joint.nodes[k].inputs) used.insert(v);
    for (const auto& v : joint.nodes[k].outputs) used.insert(v);
  }
  used.insert(g.inputs.begin(), g.inputs.end());
  used.insert(g.outputs.begin(), g.outputs.end());
  for (const auto& name_ : joint.initializer_order)
    if (used.count(name_) && !std::count(g.inputs.begin(), g.inputs.end(), name_))
      g.add_initializer(name_, joint.initializers.at(name_));
  for (const auto& v : used)
    if (const ValueInfo* vi = joint.info(v)) g.value_info[v] = *vi;
  return g;
}

}  // namespace

const char* stash_kind_name(StashedValue::Kind kind) {
  switch (kind) {
    case StashedValue::Kind::Input: return "input";
    case StashedValue::Kind::ForwardOutput: return "forward_output";
    case StashedValue::Kind::Activation: return "activation";
    case StashedValue::Kind::Recomputed: return "recomputed";
  }
  return "?";
}

TrainingGraph partition_training_graph(GradientGraph gg, const std::vector<std::string>& wrt,
                                       const std::vector<std::string>& recomputed) {
  TrainingGraph tg;
  Graph& g = gg.joint;
  std::unordered_set<std::string> grad_inputs(gg.output_grad_inputs.begin(), gg.output_grad_inputs.end());
  for (const auto& in : g.inputs)
    if (!grad_inputs.count(in)) tg.forward_inputs.push_back(in);
  std::unordered_set<std::string> wrt_grad_set(gg.wrt_grads.begin(), gg.wrt_grads.end());
  for (const auto& out : g.outputs)
    if (!wrt_grad_set.count(out)) tg.forward_outputs.push_back(out);

  // A backward node joins the forward part when it is a shape query on values the forward
  // already has: the stash then holds the shape, not the tensor.
  std::vector<Node> forward_part, backward_part, hoisted;
  std::unordered_set<std::string> forward_values(tg.forward_inputs.begin(), tg.forward_inputs.end());
  for (const auto& kv : g.initializers) forward_values.insert(kv.first);
  for (size_t k : live_nodes(g)) {
    Node& n = g.nodes[k];
    if (n.in_backward && is_shape_query(n) && forward_values.count(n.inputs[0])) {
      n.in_backward = false;
      for (const auto& v : n.outputs) forward_values.insert(v);
      hoisted.push_back(std::move(n));
    } else if (!n.in_backward) {
      for (const auto& v : n.outputs) forward_values.insert(v);
      forward_part.push_back(std::move(n));
    } else {
      backward_part.push_back(std::move(n));
    }
  }
  // A hoisted shape query runs right after the node producing its input, so that the input can
  // be freed at its last real use instead of living until the end of the forward.
  std::unordered_map<size_t, std::vector<Node>> after;  // forward node index -> queries of its outputs
  std::unordered_map<std::string, size_t> producer_of;
  for (size_t k = 0; k < forward_part.size(); ++k)
    for (const auto& v : forward_part[k].outputs)
      if (!v.empty()) producer_of[v] = k;
  std::vector<Node> ordered;
  for (Node& q : hoisted) {
    auto it = producer_of.find(q.inputs[0]);
    if (it == producer_of.end()) ordered.push_back(std::move(q));  // of an input: first of all
    else after[it->second].push_back(std::move(q));
  }
  for (size_t k = 0; k < forward_part.size(); ++k) {
    ordered.push_back(std::move(forward_part[k]));
    auto it = after.find(k);
    if (it == after.end()) continue;
    for (Node& q : it->second) ordered.push_back(std::move(q));
  }
  tg.yield_index = ordered.size();
  g.nodes = std::move(ordered);
  for (auto& n : backward_part) g.nodes.push_back(std::move(n));

  // The stash: forward values read by backward nodes or returned as gradients.
  std::unordered_set<std::string> forward_inputs(tg.forward_inputs.begin(), tg.forward_inputs.end());
  std::unordered_set<std::string> forward_outputs(tg.forward_outputs.begin(), tg.forward_outputs.end());
  std::unordered_set<std::string> seen;
  auto consider = [&](const std::string& v) {
    if (v.empty() || !forward_values.count(v) || g.is_initializer(v) || !seen.insert(v).second) return;
    StashedValue s;
    s.value = v;
    s.kind = forward_inputs.count(v) ? StashedValue::Kind::Input
             : forward_outputs.count(v) ? StashedValue::Kind::ForwardOutput
                                        : StashedValue::Kind::Activation;
    if (const ValueInfo* vi = g.info(v)) s.info = *vi;
    tg.stashed.push_back(std::move(s));
  };
  for (size_t k = tg.yield_index; k < g.nodes.size(); ++k)
    for (const auto& v : g.nodes[k].inputs) consider(v);
  for (const auto& v : gg.wrt_grads) consider(v);
  // A recomputed value still produced by a forward node and not stashed after all (the report
  // names what recompute saved; fusion may have removed the value, a later reader kept it).
  std::unordered_set<std::string> forward_produced;
  for (size_t k = 0; k < tg.yield_index; ++k)
    for (const auto& v : g.nodes[k].outputs) forward_produced.insert(v);
  for (const auto& v : recomputed) {
    if (seen.count(v) || !forward_produced.count(v)) continue;
    StashedValue s;
    s.value = v;
    s.kind = StashedValue::Kind::Recomputed;
    if (const ValueInfo* vi = g.info(v)) s.info = *vi;
    tg.recomputed.push_back(std::move(s));
  }

  tg.differentiable_outputs = gg.differentiable_outputs;
  tg.differentiable_output_positions = gg.differentiable_output_positions;
  tg.output_grad_inputs = gg.output_grad_inputs;
  tg.wrt = wrt;
  tg.wrt_grads = gg.wrt_grads;
  tg.wrt_output_dependencies = gg.wrt_output_dependencies;
  tg.graph = std::move(g);
  return tg;
}

Graph TrainingGraph::forward_graph() const {
  std::vector<std::string> outputs = forward_outputs;
  for (const auto& s : stashed)
    if (s.kind == StashedValue::Kind::Activation) outputs.push_back(s.value);
  return subgraph(graph, 0, yield_index, forward_inputs, outputs, graph.name + "_forward");
}

Graph TrainingGraph::backward_graph() const {
  std::vector<std::string> inputs;
  for (const auto& s : stashed) inputs.push_back(s.value);
  inputs.insert(inputs.end(), output_grad_inputs.begin(), output_grad_inputs.end());
  std::vector<std::string> outputs;
  for (const auto& gname : wrt_grads)
    if (!gname.empty() && !std::count(outputs.begin(), outputs.end(), gname)) outputs.push_back(gname);
  return subgraph(graph, yield_index, graph.nodes.size(), inputs, outputs, graph.name + "_backward");
}

}  // namespace onnxtrain
