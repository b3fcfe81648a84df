#include <unordered_map>

#include "passes/passes.h"

namespace onnxtrain {
namespace {

// A Transpose that only swaps the last two axes (rank >= 2): what a transpose flag expresses.
bool swaps_last_two(const Node& t, const Graph& graph) {
  if (t.op_type != "Transpose" || !t.domain.empty() || t.inputs.size() != 1 || t.outputs.size() != 1) return false;
  std::vector<int64_t> perm = t.attr_ints("perm");
  if (perm.empty()) {  // default: reverse all axes, a last-two swap only at rank 2
    const ValueInfo* vi = graph.info(t.inputs[0]);
    return vi && vi->shape && vi->shape->size() == 2;
  }
  const size_t r = perm.size();
  if (r < 2 || perm[r - 1] != static_cast<int64_t>(r - 2) || perm[r - 2] != static_cast<int64_t>(r - 1)) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

bool fold_transposes_into_matmul(Graph& graph) {
  std::unordered_map<std::string, const Node*> transposes;
  for (const Node& n : graph.nodes)
    if (swaps_last_two(n, graph)) transposes[n.outputs[0]] = &n;
  if (transposes.empty()) return false;
  bool changed = false;
  for (Node& n : graph.nodes) {
    const bool matmul = n.domain.empty() && n.op_type == "MatMul";
    const bool fused = n.domain == kOnnxTrainDomain && n.op_type == "FusedMatMul";
    const bool gemm = n.domain.empty() && n.op_type == "Gemm";
    if ((!matmul && !fused && !gemm) || n.inputs.size() < 2) continue;
    for (int i = 0; i < 2; ++i) {
      auto it = transposes.find(n.inputs[static_cast<size_t>(i)]);
      if (it == transposes.end()) continue;
      if (matmul) {
        n.op_type = "FusedMatMul";
        n.domain = kOnnxTrainDomain;
        if (!graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
      }
      const char* flag = i == 0 ? "transA" : "transB";
      n.attrs[flag] = Attribute::of_int(n.attr_int(flag, 0) ? 0 : 1);
      n.inputs[static_cast<size_t>(i)] = it->second->inputs[0];
      changed = true;
    }
  }
  return changed;
}

}  // namespace onnxtrain
