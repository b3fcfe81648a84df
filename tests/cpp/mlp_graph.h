#pragma once
// A two-layer perceptron graph, x[N,8] -> Gemm -> Relu -> Gemm -> y[N,4], used by several tests.
#include "ir/graph.h"

namespace onnxtrain::testing {

inline Graph mlp_graph(DType dt = DType::Float32) {
  Graph g;
  g.name = "mlp";
  g.inputs = {"x", "w1", "b1", "w2", "b2"};
  g.value_info["x"] = {dt, std::vector<Dim>{{-1, "N"}, {8, ""}}};
  g.value_info["w1"] = {dt, std::vector<Dim>{{16, ""}, {8, ""}}};
  g.value_info["b1"] = {dt, std::vector<Dim>{{16, ""}}};
  g.value_info["w2"] = {dt, std::vector<Dim>{{4, ""}, {16, ""}}};
  g.value_info["b2"] = {dt, std::vector<Dim>{{4, ""}}};
  AttributeMap tb{{"transB", Attribute::of_int(1)}};
  g.add_node({"fc1", "Gemm", "", {"x", "w1", "b1"}, {"h"}, tb});
  g.add_node({"relu", "Relu", "", {"h"}, {"r"}, {}});
  g.add_node({"fc2", "Gemm", "", {"r", "w2", "b2"}, {"y"}, tb});
  g.outputs = {"y"};
  return g;
}

}  // namespace onnxtrain::testing
