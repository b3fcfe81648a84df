// LogSoftmax + NegativeLogLikelihoodLoss as one SoftmaxCrossEntropyLoss: structure (one loss node
// on the scores, no LogSoftmax left) and numbers (the same loss and score gradients as the two
// ops), for rows and for a class axis that is not the innermost, with weights, ignore_index and
// each reduction; and the cases it must leave alone.
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

Graph nll_graph(const std::vector<int64_t>& scores_dims, const std::vector<int64_t>& label_dims, int64_t axis,
                const std::string& reduction, bool weighted) {
  Graph g;
  add_input(g, "scores", DType::Float32, scores_dims);
  add_input(g, "labels", DType::Int64, label_dims);
  std::vector<std::string> loss_inputs{"lp", "labels"};
  if (weighted) {
    add_input(g, "weights", DType::Float32, {scores_dims[1]});
    loss_inputs.push_back("weights");
  }
  g.add_node({"log_softmax", "LogSoftmax", "", {"scores"}, {"lp"}, {{"axis", Attribute::of_int(axis)}}});
  g.add_node({"nll", "NegativeLogLikelihoodLoss", "", loss_inputs, {"l"},
              {{"reduction", Attribute::of_string(reduction)}, {"ignore_index", Attribute::of_int(1)}}});
  g.outputs = {"l"};
  g.opsets[""] = 17;
  return g;
}

TEST(LogSoftmaxLoss, BecomesOneLossOnTheScores) {
  Graph g = nll_graph({6, 5}, {6}, -1, "mean", true);
  ASSERT_TRUE(fuse_log_softmax_loss(g));
  eliminate_dead_nodes(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& loss = g.nodes[0];
  EXPECT_EQ(loss.op_type, "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(loss.inputs, (std::vector<std::string>{"scores", "labels", "weights"}));
  EXPECT_EQ(loss.outputs, std::vector<std::string>{"l"});
  EXPECT_EQ(loss.attr_string("reduction", ""), "mean");
  EXPECT_EQ(loss.attr_int("ignore_index", 0), 1);
  EXPECT_FALSE(fuse_log_softmax_loss(g));
}

TEST(LogSoftmaxLoss, SameLossAndGradientsAsTheTwoOps) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(reduction) + (weighted ? ", weighted" : ""));
      std::vector<Tensor> rows{random_tensor(DType::Float32, {8, 70}, 1, -4, 4), labels_tensor({8}, 70)};
      std::vector<Tensor> images{random_tensor(DType::Float32, {3, 4, 9}, 3, -4, 4), labels_tensor({3, 9}, 4)};
      if (weighted) {
        rows.push_back(random_tensor(DType::Float32, {70}, 2, 0.5, 2));
        images.push_back(random_tensor(DType::Float32, {4}, 4, 0.5, 2));
      }
      // Rows of 70 classes (longer than a lane block), then classes along axis 1 of [3, 4, 9].
      expect_same_numbers(nll_graph({8, 70}, {8}, 1, reduction, weighted), rows, 2e-6);
      expect_same_numbers(nll_graph({3, 4, 9}, {3, 9}, 1, reduction, weighted), images, 2e-6);
    }
  }
}

TEST(LogSoftmaxLoss, LeavesOtherAxesAndSharedLogProbabilitiesAlone) {
  Graph other_axis = nll_graph({3, 4, 9}, {3, 9}, 2, "mean", false);
  EXPECT_FALSE(fuse_log_softmax_loss(other_axis));
  Graph unknown_rank = nll_graph({6, 5}, {6}, -1, "mean", false);
  unknown_rank.value_info["scores"].shape.reset();
  EXPECT_FALSE(fuse_log_softmax_loss(unknown_rank));
  Graph returned = nll_graph({6, 5}, {6}, 1, "mean", false);
  returned.outputs.push_back("lp");
  EXPECT_FALSE(fuse_log_softmax_loss(returned));
  Graph read_twice = nll_graph({6, 5}, {6}, 1, "mean", false);
  read_twice.add_node({"exp", "Exp", "", {"lp"}, {"p"}, {}});
  read_twice.outputs.push_back("p");
  EXPECT_FALSE(fuse_log_softmax_loss(read_twice));
}

}  // namespace
}  // namespace onnxtrain::testing
