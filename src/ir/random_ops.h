#pragma once
// Ops whose results are random draws: never folded into constants, never merged with a twin, and
// never recomputed in the expectation of the same values.
#include <string>
#include <unordered_set>

#include "ir/graph.h"

namespace onnxtrain {

inline bool is_random_op(const Node& n) {
  static const std::unordered_set<std::string> random = {"Dropout", "Bernoulli", "RandomNormal", "RandomUniform",
                                                         "RandomNormalLike", "RandomUniformLike", "Multinomial"};
  return random.count(n.op_type) > 0;
}

// Ops whose results may differ between two runs on the same inputs: random draws, and user code
// (a PyTorch autograd.Function, which may also count its calls or keep state).
inline bool is_unrepeatable_op(const Node& n) {
  return is_random_op(n) || (n.domain == kOnnxTrainDomain && n.op_type == "PythonOp");
}

// Whether any node of `g`, or of a body inside it, is unrepeatable: a recompute of `g` could give
// other values.
inline bool has_unrepeatable_ops(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (is_unrepeatable_op(n)) return true;
    for (const auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g && has_unrepeatable_ops(*kv.second.g)) return true;
  }
  return false;
}

}  // namespace onnxtrain
