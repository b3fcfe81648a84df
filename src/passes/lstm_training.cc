// LSTM's backward recomputes every gate from the saved hidden states: as many GEMM flops as
// the forward's. In a graph about to be differentiated, an LSTM becomes ai.onnxtrain::LSTMTraining,
// which also outputs its activated gates and cell states (5H values per step and batch row), and
// its backward reads those instead. Nodes with `clip` keep the recompute: the stash holds no
// clip masks.
#include "passes/passes.h"

namespace onnxtrain {

bool stash_lstm_gates(Graph& graph) {
  bool changed = false;
  for (Node& n : graph.nodes) {
    if (!n.domain.empty() || n.op_type != "LSTM" || n.has_attr("clip") || n.outputs.empty() || n.outputs[0].empty())
      continue;
    n.domain = kOnnxTrainDomain;
    n.op_type = "LSTMTraining";
    n.outputs.resize(3);
    const std::string base = n.outputs[0];
    const ValueInfo* y = graph.info(base);
    const DType dtype = y ? y->dtype : DType::Undefined;
    for (const char* what : {"_gates", "_cells"}) {
      const std::string name = graph.unique_name(base + what);
      graph.value_info[name].dtype = dtype;
      n.outputs.push_back(name);
    }
    if (!graph.opsets.count(kOnnxTrainDomain)) graph.opsets[kOnnxTrainDomain] = 1;
    changed = true;
  }
  return changed;
}

}  // namespace onnxtrain
