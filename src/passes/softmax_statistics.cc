// The softmax cross-entropy backward needs each position's log-sum-exp, which the forward has
// already computed: with it, the backward skips a max pass and an exp pass over the scores (on an
// LM head's [tokens, vocabulary] logits, a third of the loss's time). The forward node becomes
// ai.onnxtrain::SoftmaxCrossEntropyLoss (ONNX's op plus optional outputs) with the statistics
// as output 2, and every backward node that recomputes them from the same scores reads them.
#include "passes/passes.h"

namespace onnxtrain {
namespace {

bool is_forward_loss(const Node& n) {
  return n.op_type == "SoftmaxCrossEntropyLoss" && (n.domain.empty() || n.domain == kOnnxTrainDomain) &&
         !n.in_backward && n.inputs.size() >= 2 && !n.outputs.empty();
}

bool recomputes_statistics(const Node& n) {
  return n.op_type == "SoftmaxCrossEntropyLossGrad" && n.domain == kOnnxTrainDomain &&
         n.attr_int("from_log_prob", 0) == 0 && n.inputs.size() >= 3 && !n.has_input(5);
}

}  // namespace

bool share_softmax_statistics(Graph& graph) {
  bool changed = false;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    if (!is_forward_loss(graph.nodes[k])) continue;
    const std::string scores = graph.nodes[k].inputs[0], labels = graph.nodes[k].inputs[1];
    std::vector<size_t> readers;
    for (size_t j = k + 1; j < graph.nodes.size(); ++j)
      if (recomputes_statistics(graph.nodes[j]) && graph.nodes[j].inputs[1] == scores && graph.nodes[j].inputs[2] == labels)
        readers.push_back(j);
    if (readers.empty()) continue;
    // The statistic takes the scores' type: rounded to 16 bits, exp(score - lse) would be off by
    // up to |lse| / 256 in the exponent (bfloat16), three times eager's gradient error. 16-bit
    // scores keep recomputing it in float32.
    const ValueInfo* scores_type = graph.info(scores);
    if (!scores_type || is_16bit_float(scores_type->dtype)) continue;
    Node& loss = graph.nodes[k];
    if (loss.outputs.size() > 2 && !loss.outputs[2].empty()) continue;  // already shared
    const std::string lse = graph.unique_name(loss.name + "_log_sum_exp");
    loss.domain = kOnnxTrainDomain;
    loss.outputs.resize(3);
    loss.outputs[2] = lse;
    const ValueInfo* labels_info = graph.info(labels);
    ValueInfo info;
    info.dtype = scores_type->dtype;
    if (labels_info) info.shape = labels_info->shape;
    graph.value_info[lse] = info;
    for (size_t j : readers) {
      Node& grad = graph.nodes[j];
      grad.inputs.resize(6);
      grad.inputs[5] = lse;
    }
    changed = true;
  }
  if (changed && !graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
  return changed;
}

}  // namespace onnxtrain
