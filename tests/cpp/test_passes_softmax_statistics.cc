// The softmax cross-entropy backward reading its forward's log-sum-exp: structure (the forward
// outputs the statistics, the backward reads them) and numbers (the same loss and gradients as
// recomputing them), for rows, for a class axis that is not the innermost, and with
// ignore_index, weights and label smoothing.
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

Graph loss_graph(const std::vector<int64_t>& scores_dims, const std::vector<int64_t>& label_dims, bool smoothed) {
  Graph g;
  add_input(g, "scores", DType::Float32, scores_dims);
  add_input(g, "labels", DType::Int64, label_dims);
  add_input(g, "weights", DType::Float32, {scores_dims[1]});
  Node loss{"loss", "SoftmaxCrossEntropyLoss", smoothed ? kOnnxTrainDomain : "", {"scores", "labels", "weights"},
            {"l"}, {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(1)}}};
  if (smoothed) loss.attrs["label_smoothing"] = Attribute::of_float(0.2f);
  g.add_node(loss);
  g.outputs = {"l"};
  g.opsets[kOnnxTrainDomain] = 1;
  return g;
}

TEST(SoftmaxStatistics, TheBackwardReadsTheForwardsLogSumExp) {
  const Graph g = loss_graph({6, 5}, {6}, false);
  TrainingSession session(g, {{"scores"}, {}, false, 1});
  const Graph& joint = session.training_graph().graph;
  const Node* forward = nullptr;
  const Node* backward = nullptr;
  for (const auto& n : joint.nodes) {
    if (n.op_type == "SoftmaxCrossEntropyLoss") forward = &n;
    if (n.op_type == "SoftmaxCrossEntropyLossGrad") backward = &n;
  }
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(backward, nullptr);
  ASSERT_EQ(forward->outputs.size(), 3u);
  EXPECT_EQ(forward->domain, kOnnxTrainDomain);
  ASSERT_TRUE(backward->has_input(5));
  EXPECT_EQ(backward->inputs[5], forward->outputs[2]);

  Graph twice = joint;
  EXPECT_FALSE(share_softmax_statistics(twice));  // already shared
}

TEST(SoftmaxStatistics, SameLossAndGradientsAsRecomputing) {
  for (bool smoothed : {false, true}) {
    SCOPED_TRACE(smoothed ? "label smoothing" : "plain");
    // Rows of 70 classes (longer than a lane block), then classes along axis 1 of [3, 4, 9].
    expect_same_numbers(loss_graph({8, 70}, {8}, smoothed),
                        {random_tensor(DType::Float32, {8, 70}, 1, -4, 4), labels_tensor({8}, 70),
                         random_tensor(DType::Float32, {70}, 2, 0.5, 2)});
    expect_same_numbers(loss_graph({3, 4, 9}, {3, 9}, smoothed),
                        {random_tensor(DType::Float32, {3, 4, 9}, 3, -4, 4), labels_tensor({3, 9}, 4),
                         random_tensor(DType::Float32, {4}, 4, 0.5, 2)});
  }
}

TEST(SoftmaxStatistics, SixteenBitScoresKeepRecomputingTheStatisticInFloat32) {
  for (DType type : {DType::BFloat16, DType::Float16}) {
    Graph g = loss_graph({6, 5}, {6}, false);
    g.value_info["scores"].dtype = type;
    g.value_info["weights"].dtype = type;
    TrainingSession session(g, {{"scores"}, {}, false, 1});
    for (const auto& n : session.training_graph().graph.nodes) {
      if (n.op_type == "SoftmaxCrossEntropyLossGrad") {
        EXPECT_FALSE(n.has_input(5)) << dtype_name(type);
      }
      if (n.op_type == "SoftmaxCrossEntropyLoss") {
        EXPECT_LE(n.outputs.size(), 2u) << dtype_name(type);
      }
    }
  }
}

TEST(SoftmaxStatistics, LeavesABackwardThatReadsLogProbAlone) {
  Graph g;
  add_input(g, "scores", DType::Float32, {4, 3});
  add_input(g, "labels", DType::Int64, {4});
  g.add_node({"loss", "SoftmaxCrossEntropyLoss", "", {"scores", "labels"}, {"l", "lp"}, {}});
  Node grad{"grad", "SoftmaxCrossEntropyLossGrad", kOnnxTrainDomain, {"dl", "lp", "labels"}, {"ds"},
            {{"from_log_prob", Attribute::of_int(1)}}};
  grad.in_backward = true;
  g.add_node(grad);
  g.inputs.push_back("dl");
  g.outputs = {"ds"};
  EXPECT_FALSE(share_softmax_statistics(g));
}

}  // namespace
}  // namespace onnxtrain::testing
