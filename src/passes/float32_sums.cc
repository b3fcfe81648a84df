// A 16-bit gradient that a float32 sum produced and a Cast widens back to float32 at once (the
// backward of autocast's Cast of a float32 parameter or activation: a weight's gradient from its
// bfloat16 product, a bias's from its bfloat16 reduction) is written as float32 by the op that
// summed it: the op gets to = FLOAT, takes the Cast's output name, and the Cast goes. The value
// is the float32 sum instead of that sum rounded to 16 bits and widened, one rounding nearer
// float64 than eager's autocast, and neither the rounding nor the Cast's pass over memory is paid.
//
// Only for ops registered with ONNXTRAIN_FLOAT32_SUMS, and only where the Cast is the 16-bit
// value's one reader and the value is neither a graph output nor a name a subgraph reads.
#include <unordered_map>
#include <unordered_set>

#include "opdef/op_registry.h"
#include "passes/passes.h"

namespace onnxtrain {

bool write_float32_sums(Graph& graph) {
  std::unordered_set<std::string> keep_name = graph.names_read_by_subgraphs();
  keep_name.insert(graph.outputs.begin(), graph.outputs.end());
  const std::unordered_map<std::string, size_t> producer = graph.producers();
  std::unordered_map<std::string, int> reads;
  for (const Node& n : graph.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) ++reads[in];
  const OpRegistry& registry = OpRegistry::instance();
  std::vector<bool> drop(graph.nodes.size(), false);
  bool changed = false;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& cast = graph.nodes[k];
    if (!cast.domain.empty() || cast.op_type != "Cast" || cast.inputs.size() != 1 || cast.outputs.size() != 1 ||
        cast.attr_int("to", 0) != static_cast<int64_t>(DType::Float32))
      continue;
    const std::string& narrow = cast.inputs[0];
    const ValueInfo* vi = graph.info(narrow);
    if (!vi || !is_16bit_float(vi->dtype) || reads[narrow] != 1 || keep_name.count(narrow)) continue;
    auto p = producer.find(narrow);
    if (p == producer.end()) continue;
    Node& summing = graph.nodes[p->second];
    if (!registry.writes_float32_sums(summing.domain, summing.op_type) || summing.outputs.size() != 1 ||
        summing.attrs.count("to"))
      continue;
    summing.attrs["to"] = Attribute::of_int(static_cast<int64_t>(DType::Float32));
    summing.outputs[0] = cast.outputs[0];
    graph.value_info.erase(narrow);
    drop[k] = true;
    changed = true;
  }
  if (changed) graph.remove_nodes(drop);
  return changed;
}

}  // namespace onnxtrain
