#pragma once
// Helpers for the graph-pass tests: small graphs built by hand, node counts, and the numerical
// identity check that runs a graph with the optimizer off and on and compares every output and
// every gradient.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {

// Declares `name` as a graph input of `dtype` and the given dims (-1: a symbolic dim).
inline void add_input(Graph& g, const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
  g.inputs.push_back(name);
  std::vector<Dim> ds;
  for (size_t i = 0; i < dims.size(); ++i) ds.push_back(dims[i] < 0 ? Dim{-1, name + "_d" + std::to_string(i)} : Dim{dims[i], ""});
  g.value_info[name] = {dtype, ds};
}

// Class labels for a loss: (7 i + 3) mod classes at position i.
inline Tensor labels_tensor(const std::vector<int64_t>& dims, int64_t classes) {
  Tensor t = Tensor::empty(DType::Int64, TensorShape(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (i * 7 + 3) % classes;
  return t;
}

inline int count_ops(const Graph& g, const std::string& op_type) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op_type;
  return n;
}

inline double max_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    worst = std::max(worst, std::abs(a.item_as_double(i) - b.item_as_double(i)));
  return worst;
}

// Runs `g` for inference and for training (gradients of every floating input, output weights
// fixed) with the optimizer off and on; every output and gradient must agree within `tolerance`.
inline void expect_same_numbers(const Graph& g, const std::vector<Tensor>& feeds, double tolerance = 0) {
  std::vector<Tensor> plain, optimized;
  {
    InferenceSession off(g, false, 0), on(g, false, 1);
    plain = off.run(feeds, 3);
    optimized = on.run(feeds, 3);
  }
  ASSERT_EQ(plain.size(), optimized.size());
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_LE(max_difference(plain[i], optimized[i]), tolerance) << "inference output " << i;
  std::vector<std::string> wrt;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (is_floating(feeds[i].dtype())) wrt.push_back(g.inputs[i]);
  if (wrt.empty()) return;
  std::vector<std::vector<Tensor>> grads;
  for (int level : {0, 1}) {
    TrainingSession session(g, {wrt, {}, false, level});
    std::vector<Tensor> outputs;
    auto call = session.forward(feeds, 3, outputs);
    std::vector<Tensor> weights;
    for (int pos : session.training_graph().differentiable_output_positions)
      weights.push_back(random_tensor(outputs[static_cast<size_t>(pos)].dtype(), outputs[static_cast<size_t>(pos)].shape(),
                                      77 + pos));
    grads.push_back(session.backward(*call, weights));
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_EQ(grads[0][i].defined(), grads[1][i].defined()) << "gradient " << i;
    if (grads[0][i].defined()) {
      EXPECT_LE(max_difference(grads[0][i], grads[1][i]), tolerance) << "gradient " << i;
    }
  }
}

}  // namespace onnxtrain::testing
