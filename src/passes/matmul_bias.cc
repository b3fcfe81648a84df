// A bias row added to a matrix product (Linear on 3-D inputs exports as MatMul then Add) goes
// into the product: FusedMatMul writes the bias into its output first and the GEMM accumulates
// onto it, so the output is written once instead of written, read and written again.
//
// Only when the shapes say the Add cannot change the product's shape: the bias is 1-D with a
// static length equal to the product's static last dim (or 1), and nothing else reads the
// product before the bias.
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"

namespace onnxtrain {
namespace {

int64_t static_last_dim(const Graph& g, const std::string& value, int* rank) {
  const ValueInfo* vi = g.info(value);
  if (!vi || !vi->shape || vi->shape->empty()) return -1;
  *rank = static_cast<int>(vi->shape->size());
  return vi->shape->back().value;  // -1 when symbolic
}

bool is_product(const Node& n) {
  if (n.op_type == "MatMul" && n.domain.empty()) return n.inputs.size() == 2;
  return n.op_type == "FusedMatMul" && n.domain == kOnnxTrainDomain && !n.has_input(2);
}

}  // namespace

bool fuse_matmul_bias(Graph& graph) {
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, int> reads;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    for (const auto& out : graph.nodes[k].outputs)
      if (!out.empty()) producer[out] = k;
    for (const auto& in : graph.nodes[k].inputs)
      if (!in.empty()) ++reads[in];
  }
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());
  std::vector<bool> drop(graph.nodes.size(), false);
  bool changed = false;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& add = graph.nodes[k];
    if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string& product = add.inputs[static_cast<size_t>(side)];
      const std::string& bias = add.inputs[static_cast<size_t>(1 - side)];
      auto p = producer.find(product);
      if (p == producer.end() || drop[p->second] || !is_product(graph.nodes[p->second])) continue;
      const Node& mm = graph.nodes[p->second];
      if (mm.in_backward != add.in_backward || reads[product] != 1 || graph_outputs.count(product)) continue;
      int product_rank = 0, bias_rank = 0;
      const int64_t n = static_last_dim(graph, product, &product_rank);
      const int64_t length = static_last_dim(graph, bias, &bias_rank);
      if (bias_rank != 1 || product_rank < 2 || n < 0 || length < 0 || (length != n && length != 1)) continue;
      const ValueInfo* pi = graph.info(product);
      const ValueInfo* bi = graph.info(bias);
      if (!pi || !bi || pi->dtype != bi->dtype || (pi->dtype != DType::Float32 && pi->dtype != DType::Float64)) continue;
      // The bias must exist when the product runs: it sits before it in the order, or is a
      // graph input or initializer.
      auto b = producer.find(bias);
      if (b != producer.end() && b->second > p->second) continue;
      Node fused = mm;
      fused.op_type = "FusedMatMul";
      fused.domain = kOnnxTrainDomain;
      fused.inputs = {mm.inputs[0], mm.inputs[1], bias};
      fused.outputs = {add.outputs[0]};
      fused.name = mm.name;
      graph.nodes[p->second] = std::move(fused);
      drop[k] = true;
      changed = true;
      break;
    }
  }
  if (!changed) return false;
  if (!graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
  graph.remove_nodes(drop);
  return true;
}

}  // namespace onnxtrain
