#include "onnx/subgraph_closure.h"

#include <unordered_set>

namespace onnxtrain {
namespace {

// Per op: the graph attributes it runs.
std::vector<std::string> body_attributes(const Node& node) {
  if (!node.domain.empty() || !is_closed_op_type(node.op_type)) return {};
  if (node.op_type == "If") return {"then_branch", "else_branch"};
  return {"body"};
}

// A body whose output is one of its inputs (an else branch returning an outer value as is)
// gets an Identity, so that every body output is produced by a node of the body.
void give_outputs_producers(Graph& body) {
  std::unordered_set<std::string> inputs(body.inputs.begin(), body.inputs.end());
  for (const auto& [name, t] : body.initializers) inputs.insert(name);
  for (std::string& out : body.outputs) {
    if (!inputs.count(out)) continue;
    Node id;
    id.op_type = "Identity";
    id.inputs = {out};
    const std::string fresh = body.unique_name(out + "_out");
    id.outputs = {fresh};
    if (const ValueInfo* vi = body.info(out)) body.value_info[fresh] = *vi;
    body.add_node(std::move(id));
    out = fresh;
  }
}

void close_node(Node& node, Graph& outer) {
  const std::vector<std::string> bodies = body_attributes(node);
  if (bodies.empty()) return;
  // Scan-8 has a batch axis that later versions dropped.
  if (node.op_type == "Scan" && outer.opset() < 9) node.attrs["batched"] = Attribute::of_int(1);
  std::vector<std::string> captured;
  std::unordered_set<std::string> seen;
  for (const std::string& key : bodies) {
    auto it = node.attrs.find(key);
    OT_CHECK(it != node.attrs.end() && it->second.kind == Attribute::Kind::Graph && it->second.g,
             node.describe(), " has no graph attribute '", key, "'");
    // Copies of a graph share their bodies: close a body of our own.
    it->second.g = std::make_shared<Graph>(*it->second.g);
    Graph& body = *it->second.g;
    body.opsets = outer.opsets;
    close_subgraphs(body);
    for (const std::string& v : free_values(body))
      if (seen.insert(v).second) captured.push_back(v);
  }
  for (const std::string& key : bodies) {
    Graph& body = *node.attrs.at(key).g;
    for (const std::string& v : captured) {
      body.inputs.push_back(v);
      if (const ValueInfo* vi = outer.info(v)) body.value_info[v] = *vi;
    }
    give_outputs_producers(body);
  }
  node.inputs.insert(node.inputs.end(), captured.begin(), captured.end());
  node.domain = kOnnxTrainDomain;
  node.attrs["num_captured"] = Attribute::of_int(static_cast<int64_t>(captured.size()));
  if (!outer.opsets.count(kOnnxTrainDomain)) outer.opsets[kOnnxTrainDomain] = 1;
}

}  // namespace

std::vector<std::string> free_values(const Graph& body) {
  std::unordered_set<std::string> defined(body.inputs.begin(), body.inputs.end());
  for (const auto& [name, t] : body.initializers) defined.insert(name);
  std::vector<std::string> free;
  std::unordered_set<std::string> listed;
  auto use = [&](const std::string& v) {
    if (!v.empty() && !defined.count(v) && listed.insert(v).second) free.push_back(v);
  };
  for (const Node& n : body.nodes) {
    for (const std::string& in : n.inputs) use(in);
    for (const std::string& out : n.outputs)
      if (!out.empty()) defined.insert(out);
  }
  for (const std::string& out : body.outputs) use(out);
  return free;
}

bool is_closed_op_type(const std::string& op_type) {
  return op_type == "If" || op_type == "Loop" || op_type == "Scan" || op_type == "SequenceMap";
}

bool is_closed_control_flow(const Node& node) {
  return node.domain == kOnnxTrainDomain && is_closed_op_type(node.op_type) && node.has_attr("num_captured");
}

void close_subgraphs(Graph& graph) {
  for (Node& node : graph.nodes) {
    close_node(node, graph);
    if (!is_closed_control_flow(node) || node.op_type != "If") continue;
    const Graph& then_branch = *node.attrs.at("then_branch").g;
    const Graph& else_branch = *node.attrs.at("else_branch").g;
    OT_CHECK(then_branch.outputs.size() == node.outputs.size() && else_branch.outputs.size() == node.outputs.size(),
             node.describe(), " has ", node.outputs.size(), " outputs but its branches return ",
             then_branch.outputs.size(), " and ", else_branch.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      ValueInfo& declared = graph.value_info[node.outputs[i]];
      const ValueInfo* from_branch = then_branch.info(then_branch.outputs[i]);
      if (!from_branch || from_branch->dtype == DType::Undefined) from_branch = else_branch.info(else_branch.outputs[i]);
      if (declared.dtype == DType::Undefined && from_branch) declared.dtype = from_branch->dtype;
    }
  }
}

}  // namespace onnxtrain
