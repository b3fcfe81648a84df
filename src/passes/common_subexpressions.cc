#include <cstring>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "opdef/op_registry.h"
#include "passes/passes.h"

namespace onnxtrain {
namespace {

// Everything that decides a node's result besides its inputs' values; empty when the node must
// not be merged (random, or with subgraphs).
std::string fingerprint(const Node& n) {
  if (is_unrepeatable_op(n)) return "";
  std::ostringstream os;
  os << n.domain << '\x1f' << n.op_type << '\x1f' << n.in_backward << '\x1f' << n.outputs.size();
  for (const auto& in : n.inputs) os << '\x1f' << in;
  for (const auto& [key, a] : n.attrs) {
    os << '\x1e' << key << ':' << static_cast<int>(a.kind) << ':';
    switch (a.kind) {
      case Attribute::Kind::Float: os << a.f; break;
      case Attribute::Kind::Int: os << a.i; break;
      case Attribute::Kind::String: os << a.s; break;
      case Attribute::Kind::Floats: for (float f : a.floats) os << f << ','; break;
      case Attribute::Kind::Ints: for (int64_t i : a.ints) os << i << ','; break;
      case Attribute::Kind::Strings: for (const auto& s : a.strings) os << s << '\x1d'; break;
      case Attribute::Kind::TypeProto: os << a.s; break;
      case Attribute::Kind::Tensor:
        os << static_cast<int>(a.t.dtype()) << a.t.shape().str();
        os.write(static_cast<const char*>(a.t.raw_data()), static_cast<std::streamsize>(a.t.nbytes()));
        break;
      case Attribute::Kind::Graph: return "";
    }
  }
  return os.str();
}

}  // namespace

bool eliminate_common_subexpressions(Graph& graph) {
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());
  std::unordered_map<std::string, size_t> first;   // fingerprint -> node index
  std::unordered_map<std::string, std::string> rename;  // merged output -> surviving output
  std::vector<bool> drop(graph.nodes.size(), false);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    Node& n = graph.nodes[k];
    for (auto& in : n.inputs) {
      auto it = rename.find(in);
      if (it != rename.end()) in = it->second;
    }
    const std::string key = fingerprint(n);
    if (key.empty()) continue;
    auto [it, fresh] = first.emplace(key, k);
    if (fresh) continue;
    const Node& kept = graph.nodes[it->second];
    // A graph output keeps its own name, and an output the survivor does not produce has no
    // replacement: such a node stays.
    bool mergeable = true;
    for (size_t o = 0; o < n.outputs.size(); ++o)
      if (!n.outputs[o].empty() && (graph_outputs.count(n.outputs[o]) || kept.outputs[o].empty())) mergeable = false;
    if (!mergeable) continue;
    for (size_t o = 0; o < n.outputs.size(); ++o)
      if (!n.outputs[o].empty()) rename[n.outputs[o]] = kept.outputs[o];
    drop[k] = true;
  }
  if (rename.empty()) return false;
  graph.remove_nodes(drop);
  return true;
}

}  // namespace onnxtrain
