// Casts that change no value go: a Cast to the type its input already has, and the second Cast of
// a pair that widens exactly and casts back (autocast's bfloat16 -> float32 -> bfloat16). Their
// readers read the value the pair started from. Both are exact, forward and backward: a Cast's
// gradient is the Cast back, which cancels the same way.
//
// A Cast stays when its input's type is unknown, when its output is a graph output (its name is
// the caller's), or when a subgraph may read its output by name.
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"

namespace onnxtrain {
namespace {

// Whether every value of `narrow` is a value of `wide`.
bool holds_exactly(DType wide, DType narrow) {
  if (wide == narrow) return true;
  if (is_16bit_float(narrow)) return wide == DType::Float32 || wide == DType::Float64;
  return narrow == DType::Float32 && wide == DType::Float64;
}

// A Cast's target type; Undefined for the string form of Cast-1 (rare, left alone).
DType cast_target(const Node& n) {
  if (!n.domain.empty() || n.op_type != "Cast" || n.inputs.size() != 1 || n.outputs.size() != 1) return DType::Undefined;
  auto it = n.attrs.find("to");
  if (it == n.attrs.end() || it->second.kind != Attribute::Kind::Int) return DType::Undefined;
  return static_cast<DType>(it->second.i);
}

}  // namespace

bool fold_casts(Graph& graph) {
  std::unordered_set<std::string> keep_name = graph.names_read_by_subgraphs();
  keep_name.insert(graph.outputs.begin(), graph.outputs.end());
  std::unordered_map<std::string, const Node*> producer;
  for (const Node& n : graph.nodes)
    for (const auto& o : n.outputs) producer[o] = &n;
  auto type_of = [&](const std::string& value) {
    const ValueInfo* vi = graph.info(value);
    return vi ? vi->dtype : DType::Undefined;
  };

  std::unordered_map<std::string, std::string> rename;  // a folded Cast's output -> the value it equals
  for (const Node& n : graph.nodes) {
    const DType to = cast_target(n);
    if (to == DType::Undefined || keep_name.count(n.outputs[0])) continue;
    std::string source = n.inputs[0];
    if (auto r = rename.find(source); r != rename.end()) source = r->second;
    if (type_of(source) == to) {  // an identity
      rename[n.outputs[0]] = source;
      continue;
    }
    // Cast(Cast(x: to -> wider) -> to) is x.
    auto p = producer.find(source);
    if (p == producer.end()) continue;
    const Node& inner = *p->second;
    const DType wider = cast_target(inner);
    if (wider != DType::Undefined && type_of(inner.inputs[0]) == to && holds_exactly(wider, to))
      rename[n.outputs[0]] = rename.count(inner.inputs[0]) ? rename[inner.inputs[0]] : inner.inputs[0];
  }
  if (rename.empty()) return false;
  for (Node& n : graph.nodes)
    for (auto& in : n.inputs)
      if (auto r = rename.find(in); r != rename.end()) in = r->second;
  // The folded Casts now have no readers; eliminate_dead_nodes removes them.
  return true;
}

}  // namespace onnxtrain
