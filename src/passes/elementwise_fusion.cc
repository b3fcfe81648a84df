// Chains of elementwise ops become one ai.onnxtrain::FusedElementwise node (ops/fused/), forward
// and backward alike: one loop over the data instead of one pass per op, and no buffers for the
// values only the chain reads. Which ops can join, and as which instruction, each op's record
// says (OpRecord::elementwise).
//
// A group grows along the graph's order: a node joins the group of one of its inputs' producers
// when it runs in the same phase and element type and every other input it reads is defined
// before the group starts (so fusing cannot create a cycle). Values of the group that other nodes
// read, or that are graph outputs, stay outputs of the fused node under their own names. Shapes
// are not needed here (most are symbolic, many unknown): the kernel checks at run time that the
// values it must write all have the broadcast shape, and evaluates op by op when not. On 16-bit
// floats even a lone op becomes a fused node, which computes on them without float32 copies.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "opdef/op_registry.h"
#include "passes/passes.h"

namespace onnxtrain {
namespace {

struct Group {
  std::vector<size_t> members;  // node indices, in order
  DType dtype = DType::Undefined;
  bool in_backward = false;
  size_t first = 0;
};

// The common float type of a node's inputs, or Undefined. Every op the kernel runs keeps its
// input type, so the outputs of lowered nodes are typed here even where no value info says so.
DType float_type_of(const Graph& g, const Node& n, const std::unordered_map<std::string, DType>& typed) {
  DType t = DType::Undefined;
  for (const auto& v : n.inputs) {
    auto known = typed.find(v);
    const ValueInfo* vi = g.info(v);
    const DType d = known != typed.end() ? known->second : vi ? vi->dtype : DType::Undefined;
    if (!is_floating(d)) return DType::Undefined;
    if (t != DType::Undefined && d != t) return DType::Undefined;
    t = d;
  }
  return t;
}

// The instruction that runs `n` in a fused loop: its op's record decides.
bool lower(const Node& n, LoweredInstruction& out) {
  if (n.outputs.size() != 1) return false;
  for (const auto& in : n.inputs)
    if (in.empty()) return false;
  const OpRecord* record = OpRegistry::instance().find(n);
  return record && record->elementwise && record->elementwise(n, out);
}

}  // namespace

bool fuse_elementwise(Graph& graph) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    for (const auto& out : graph.nodes[k].outputs)
      if (!out.empty()) producer[out] = k;

  std::vector<Group> groups;
  std::vector<int> group_of(graph.nodes.size(), -1);
  std::vector<LoweredInstruction> lowered(graph.nodes.size());
  std::unordered_map<std::string, DType> typed;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& n = graph.nodes[k];
    if (!lower(n, lowered[k])) continue;
    const DType dtype = float_type_of(graph, n, typed);
    if (dtype == DType::Undefined) continue;
    typed[n.outputs[0]] = dtype;
    int joined = -1;
    for (const auto& in : n.inputs) {
      auto p = producer.find(in);
      if (p == producer.end() || group_of[p->second] < 0) continue;
      const Group& g = groups[static_cast<size_t>(group_of[p->second])];
      if (g.in_backward != n.in_backward || g.dtype != dtype) continue;
      bool acyclic = true;  // every input from outside the group is defined before the group starts
      for (const auto& other : n.inputs) {
        auto q = producer.find(other);
        if (q == producer.end() || group_of[q->second] == group_of[p->second]) continue;
        acyclic = acyclic && q->second < g.first;
      }
      if (acyclic) {
        joined = group_of[p->second];
        break;
      }
    }
    if (joined < 0) {
      groups.push_back({{}, dtype, n.in_backward, k});
      joined = static_cast<int>(groups.size()) - 1;
    }
    groups[static_cast<size_t>(joined)].members.push_back(k);
    group_of[k] = joined;
  }

  // Who reads what, to know which group values must stay outputs.
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    for (const auto& in : graph.nodes[k].inputs)
      if (!in.empty()) readers[in].push_back(k);
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());

  bool changed = false;
  std::vector<bool> drop(graph.nodes.size(), false);
  std::map<size_t, Node> replacement;  // at the last member's position
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    // A lone op is worth a fused node only on 16-bit floats: its own kernel would run on float32
    // copies, the fused one reads and writes the 16-bit values directly.
    if (g.members.size() < 2 && !is_16bit_float(g.dtype)) continue;
    Node fusedn;
    fusedn.op_type = "FusedElementwise";
    fusedn.domain = kOnnxTrainDomain;
    fusedn.in_backward = g.in_backward;
    fusedn.name = graph.unique_name(graph.nodes[g.members.back()].name + "_fused");
    std::unordered_map<std::string, int64_t> reg;
    std::vector<std::string> ops;
    std::vector<int64_t> args, outputs;
    std::vector<float> consts, consts2;
    for (size_t k : g.members)
      for (const auto& in : graph.nodes[k].inputs) {
        auto p = producer.find(in);
        const bool internal = p != producer.end() && group_of[p->second] == static_cast<int>(gi);
        if (!internal && !reg.count(in)) {
          reg[in] = static_cast<int64_t>(fusedn.inputs.size());
          fusedn.inputs.push_back(in);
        }
      }
    const int64_t num_inputs = static_cast<int64_t>(fusedn.inputs.size());
    for (size_t i = 0; i < g.members.size(); ++i) {
      const Node& n = graph.nodes[g.members[i]];
      ops.push_back(lowered[g.members[i]].instruction->name);
      args.push_back(reg.at(n.inputs[0]));
      args.push_back(n.inputs.size() > 1 ? reg.at(n.inputs[1]) : 0);
      consts.push_back(lowered[g.members[i]].immediate);
      consts2.push_back(lowered[g.members[i]].immediate2);
      reg[n.outputs[0]] = num_inputs + static_cast<int64_t>(i);
      bool visible = graph_outputs.count(n.outputs[0]) > 0;
      for (size_t r : readers[n.outputs[0]]) visible = visible || group_of[r] != static_cast<int>(gi);
      if (visible) {
        fusedn.outputs.push_back(n.outputs[0]);
        outputs.push_back(num_inputs + static_cast<int64_t>(i));
      }
      drop[g.members[i]] = true;
    }
    fusedn.attrs["ops"] = Attribute::of_strings(ops);
    fusedn.attrs["args"] = Attribute::of_ints(args);
    fusedn.attrs["consts"] = Attribute::of_floats(consts);
    if (std::any_of(consts2.begin(), consts2.end(), [](float c) { return c != 0.0f; }))
      fusedn.attrs["consts2"] = Attribute::of_floats(consts2);
    fusedn.attrs["outputs"] = Attribute::of_ints(outputs);
    replacement[g.members.back()] = std::move(fusedn);
    changed = true;
  }
  if (!changed) return false;
  if (!graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    auto r = replacement.find(k);
    if (r != replacement.end()) nodes.push_back(std::move(r->second));
    else if (!drop[k]) nodes.push_back(std::move(graph.nodes[k]));
  }
  graph.nodes = std::move(nodes);
  // A value of the group read by a node that sat between its members now comes later.
  graph.sort_topologically();
  return true;
}

}  // namespace onnxtrain
