// The boundary markers of torch.utils.checkpoint segments (ai.onnxtrain::CheckpointBegin and
// CheckpointEnd, written by onnxtrain/_checkpoint.py) become Node::recompute flags on the
// segments' nodes, and the markers go: every reader of a marker's output reads its input.
//
// A segment's nodes are those that lead to its CheckpointEnd's inputs and either descend from its
// CheckpointBegin's outputs or compute from constants alone (a transposed weight). A value the
// segment reads from outside (a tensor the checkpointed function captured) is the segment's
// input like the ones passed in: backward stashes it, as torch's checkpoint keeps it alive.
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"

namespace onnxtrain {
namespace {

bool is_marker(const Node& n, const char* op) { return n.domain == kOnnxTrainDomain && n.op_type == op; }
bool is_marker(const Node& n) { return is_marker(n, "CheckpointBegin") || is_marker(n, "CheckpointEnd"); }

int64_t segment_of(const Node& n) {
  OT_CHECK(n.has_attr("segment"), n.describe(), " has no 'segment' attribute naming its checkpointed segment");
  OT_CHECK(n.inputs.size() == n.outputs.size(), n.describe(), " has ", n.inputs.size(), " inputs and ",
           n.outputs.size(), " outputs; a checkpoint boundary passes each input through as its output");
  return n.attr_int("segment", -1);
}

// Flags the nodes of the segment ending at nodes[end] and starting at `begin` (-1: none; a
// segment whose inputs are not tensors).
void flag_segment(Graph& g, long begin, size_t end, const std::vector<bool>& constant) {
  std::unordered_set<std::string> downstream;
  std::vector<bool> descends(g.nodes.size(), false);
  if (begin >= 0) {
    downstream.insert(g.nodes[static_cast<size_t>(begin)].outputs.begin(), g.nodes[static_cast<size_t>(begin)].outputs.end());
    for (size_t k = static_cast<size_t>(begin) + 1; k < end; ++k) {
      for (const auto& in : g.nodes[k].inputs) descends[k] = descends[k] || (!in.empty() && downstream.count(in));
      if (descends[k]) downstream.insert(g.nodes[k].outputs.begin(), g.nodes[k].outputs.end());
    }
  }
  std::unordered_set<std::string> wanted(g.nodes[end].inputs.begin(), g.nodes[end].inputs.end());
  for (size_t k = end; k-- > 0;) {
    Node& n = g.nodes[k];
    if (!descends[k] && !constant[k]) continue;
    bool feeds = false;
    for (const auto& out : n.outputs) feeds = feeds || (!out.empty() && wanted.count(out));
    if (!feeds) continue;
    if (!is_marker(n)) n.recompute = true;
    for (const auto& in : n.inputs)
      if (!in.empty()) wanted.insert(in);
  }
}

}  // namespace

bool mark_checkpoint_segments(Graph& graph) {
  std::map<int64_t, size_t> begins, ends;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& n = graph.nodes[k];
    if (!is_marker(n)) continue;
    auto& side = is_marker(n, "CheckpointBegin") ? begins : ends;
    OT_CHECK(side.emplace(segment_of(n), k).second, n.describe(), ": another ", n.op_type, " bounds segment ",
             segment_of(n), " already");
  }
  if (begins.empty() && ends.empty()) return false;

  // Nodes computing from initializers and constants alone.
  std::vector<bool> constant(graph.nodes.size(), false);
  std::unordered_set<std::string> constant_values;
  for (const auto& kv : graph.initializers) constant_values.insert(kv.first);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& n = graph.nodes[k];
    bool all = !is_marker(n);
    for (const auto& in : n.inputs) all = all && (in.empty() || (constant_values.count(in) && !graph.is_input(in)));
    constant[k] = all;
    if (all) constant_values.insert(n.outputs.begin(), n.outputs.end());
  }
  for (const auto& [segment, end] : ends) {
    auto it = begins.find(segment);
    OT_CHECK(it == begins.end() || it->second < end, graph.nodes[end].describe(), " comes before the CheckpointBegin "
             "of its segment ", segment);
    flag_segment(graph, it == begins.end() ? -1 : static_cast<long>(it->second), end, constant);
  }

  // Markers out: readers of a marker's output read its input (through nested markers too). A
  // marker output that is a graph output keeps its name through an Identity.
  std::unordered_map<std::string, std::string> source;
  for (const Node& n : graph.nodes)
    if (is_marker(n))
      for (size_t i = 0; i < n.outputs.size(); ++i) source[n.outputs[i]] = n.inputs[i];
  auto resolve = [&](std::string v) {
    for (auto it = source.find(v); it != source.end(); it = source.find(v)) v = it->second;
    return v;
  };
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (Node& n : graph.nodes) {
    if (!is_marker(n)) {
      for (auto& in : n.inputs)
        if (!in.empty()) in = resolve(in);
      kept.push_back(std::move(n));
      continue;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!graph_outputs.count(n.outputs[i])) continue;
      Node identity;
      identity.name = n.name + "/" + n.outputs[i];
      identity.op_type = "Identity";
      identity.inputs = {resolve(n.inputs[i])};
      identity.outputs = {n.outputs[i]};
      kept.push_back(std::move(identity));
    }
  }
  graph.nodes = std::move(kept);
  return true;
}

}  // namespace onnxtrain
