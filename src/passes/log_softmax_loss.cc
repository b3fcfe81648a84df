// NegativeLogLikelihoodLoss(LogSoftmax(scores) along the class axis) becomes one
// SoftmaxCrossEntropyLoss(scores): the loss torch.export writes for F.cross_entropy. The fused
// op never stores the log-probabilities (on an LM head, a [tokens, vocabulary] float32 tensor that
// the backward would keep) and its backward writes dScores in one pass, where NLL's backward
// wrote a dense one-hot gradient for LogSoftmax's backward to read.
//
// The LogSoftmax must be read by that loss alone, along axis 1 (ONNX's class axis of both
// losses), and keep no name the caller or a subgraph reads; the loss keeps its attributes
// (reduction, ignore_index) and its class weights.
#include <string>
#include <unordered_set>

#include "passes/passes.h"

namespace onnxtrain {
namespace {

bool is_nll(const Node& n) {
  return n.domain.empty() && n.op_type == "NegativeLogLikelihoodLoss" && n.has_input(0) && n.has_input(1) &&
         n.outputs.size() == 1;
}

// LogSoftmax's axis as a non-negative index; -1 where the rank it needs is unknown.
int64_t log_softmax_axis(const Graph& graph, const Node& n) {
  const int64_t fallback = graph.opset() >= 13 ? -1 : 1;
  const int64_t axis = n.attr_int("axis", fallback);
  if (axis >= 0) return axis;
  const ValueInfo* info = graph.info(n.inputs[0]);
  if (!info || !info->shape) return -1;
  return axis + static_cast<int64_t>(info->shape->size());
}

}  // namespace

bool fuse_log_softmax_loss(Graph& graph) {
  std::unordered_set<std::string> keep_name = graph.names_read_by_subgraphs();
  keep_name.insert(graph.outputs.begin(), graph.outputs.end());
  const auto producers = graph.producers();
  const auto consumers = graph.consumers();
  bool changed = false;
  for (Node& loss : graph.nodes) {
    if (!is_nll(loss)) continue;
    const std::string& log_prob = loss.inputs[0];
    auto made = producers.find(log_prob);
    if (made == producers.end() || keep_name.count(log_prob)) continue;
    const Node& log_softmax = graph.nodes[made->second];
    if (!log_softmax.domain.empty() || log_softmax.op_type != "LogSoftmax" || log_softmax.outputs.size() != 1 ||
        log_softmax.in_backward != loss.in_backward || log_softmax_axis(graph, log_softmax) != 1)
      continue;
    auto readers = consumers.find(log_prob);
    if (readers == consumers.end() || readers->second.size() != 1) continue;
    loss.op_type = "SoftmaxCrossEntropyLoss";
    loss.domain = kOnnxTrainDomain;
    loss.inputs[0] = log_softmax.inputs[0];
    changed = true;
    // The LogSoftmax has no reader left; eliminate_dead_nodes removes it.
  }
  if (changed && !graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
  return changed;
}

}  // namespace onnxtrain
