// The partitioner stashes exactly what backward reads, and nothing else.
#include <gtest/gtest.h>

#include <map>

#include "onnx/model_io.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

std::map<std::string, std::string> stash_of(const std::vector<std::string>& wrt) {
  TrainingSession s(mlp_graph(), {wrt, {}, false});
  std::map<std::string, std::string> out;
  for (const auto& v : s.training_graph().stashed) out[v.value] = stash_kind_name(v.kind);
  return out;
}

TEST(Partition, MlpStashesInputActivationAndNextWeight) {
  using M = std::map<std::string, std::string>;
  // dW1 needs x; dW2 and Relu's gradient need r; dr needs W2. h, W1 and the biases are not needed.
  EXPECT_EQ(stash_of({"w1", "b1", "w2", "b2"}), (M{{"x", "input"}, {"r", "activation"}, {"w2", "input"}}));
  // Asking for dx also needs W1.
  EXPECT_EQ(stash_of({"x", "w1", "b1", "w2", "b2"}),
            (M{{"x", "input"}, {"r", "activation"}, {"w1", "input"}, {"w2", "input"}}));
  // With the first layer frozen, backward never goes below fc2: only r remains.
  EXPECT_EQ(stash_of({"w2", "b2"}), (M{{"r", "activation"}}));
}

TEST(Partition, YieldSplitsForwardFromBackward) {
  TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
  const TrainingGraph& tg = s.training_graph();
  ASSERT_EQ(tg.yield_index, 3u);
  EXPECT_EQ(tg.graph.nodes[0].name, "fc1");
  EXPECT_EQ(tg.graph.nodes[2].name, "fc2");
  for (size_t k = tg.yield_index; k < tg.graph.nodes.size(); ++k)
    EXPECT_NE(tg.graph.nodes[k].name.find("_grad/"), std::string::npos) << tg.graph.nodes[k].name;
  EXPECT_EQ(tg.forward_outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(tg.differentiable_outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(tg.wrt_grads.size(), 4u);
  // The three graphs are valid ONNX.
  EXPECT_NO_THROW(save_model(tg.graph, {}, true));
  EXPECT_NO_THROW(save_model(tg.forward_graph(), {}, true));
  EXPECT_NO_THROW(save_model(tg.backward_graph(), {}, true));
}

TEST(Partition, StashReportCountsBytes) {
  TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
  std::vector<Tensor> feeds = {random_tensor(DType::Float32, {5, 8}, 1), random_tensor(DType::Float32, {16, 8}, 2),
                               random_tensor(DType::Float32, {16}, 3), random_tensor(DType::Float32, {4, 16}, 4),
                               random_tensor(DType::Float32, {4}, 5)};
  std::vector<Tensor> outputs;
  auto call = s.forward(feeds, 0, outputs);
  int64_t activation_bytes = 0;
  for (const auto& e : call->stash_report())
    if (e.kind == "activation") activation_bytes += e.bytes;
  EXPECT_EQ(activation_bytes, 5 * 16 * 4);  // r: float32[5x16]
  EXPECT_EQ(call->stashed_bytes(), 5 * 16 * 4);
  EXPECT_EQ(call->stashed_bytes(true), 5 * 16 * 4 + 5 * 8 * 4 + 4 * 16 * 4);
}

TEST(Partition, ShapeQueriesRunInForward) {
  // The bias of a Gemm on a dynamic batch: its gradient sums over the batch. The reduction's
  // target shape is static here, so it becomes a constant and nothing extra is stashed.
  TrainingSession s(mlp_graph(), {{"b1"}, {}, false});
  for (const auto& v : s.training_graph().stashed) EXPECT_NE(v.value, "b1");
}

TEST(Partition, HoistedShapeQueriesRunRightAfterTheirInput) {
  // y = ReduceSum(Neg(x)) on a dynamic shape: the gradient expands dY to Shape(a), a = Neg(x), and
  // needs nothing else of a. The hoisted Shape(a) must run right after Neg, so that a can be
  // freed before the rest of the forward, not after the reduction at the end of it.
  Graph g;
  g.inputs = {"x"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{-1, "n"}, {3, ""}}};
  g.add_node({"neg", "Neg", "", {"x"}, {"a"}, {}});
  g.add_node({"sum", "ReduceSum", "", {"a"}, {"y"}, {{"keepdims", Attribute::of_int(0)}}});
  g.outputs = {"y"};
  TrainingSession s(g, {{"x"}, {}, false, 0});
  const TrainingGraph& tg = s.training_graph();
  ASSERT_EQ(tg.yield_index, 3u);
  EXPECT_EQ(tg.graph.nodes[0].name, "neg");
  EXPECT_EQ(tg.graph.nodes[1].op_type, "Shape");
  EXPECT_EQ(tg.graph.nodes[1].inputs[0], "a");
  EXPECT_EQ(tg.graph.nodes[2].name, "sum");
  for (const auto& v : tg.stashed) EXPECT_NE(v.value, "a");
}

}  // namespace
}  // namespace onnxtrain::testing
