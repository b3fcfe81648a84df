// The clean-up passes: dead nodes, common subexpressions, constant folding. Each on structure
// (what is left of a hand-built graph) and on numbers (the optimized graph computes the same).
#include <cstdlib>

#include "passes/passes.h"
#include "passes/pipeline.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

TEST(DeadNodes, DropsUnreadNodesAndInitializersAndKeepsOutputs) {
  Graph g;
  add_input(g, "x", DType::Float32, {2, 3});
  g.add_initializer("unused_weight", Tensor::zeros(DType::Float32, {3}));
  g.add_initializer("one", Tensor::scalar<float>(1.0f));
  g.add_node({"used", "Add", "", {"x", "one"}, {"y"}, {}});
  g.add_node({"dead", "Exp", "", {"x"}, {"e"}, {}});
  g.add_node({"dead_too", "Neg", "", {"e"}, {"ne"}, {}});
  g.outputs = {"y"};
  EXPECT_TRUE(eliminate_dead_nodes(g));
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].name, "used");
  EXPECT_FALSE(g.is_initializer("unused_weight"));
  EXPECT_TRUE(g.is_initializer("one"));
  EXPECT_FALSE(eliminate_dead_nodes(g));
}

TEST(CommonSubexpressions, MergesEqualNodesButNotRandomOnesOrGraphOutputs) {
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 4});
  g.add_initializer("ratio", Tensor::scalar<float>(0.5f));
  g.add_initializer("train", Tensor::scalar<bool>(true));
  g.add_node({"s1", "Shape", "", {"x"}, {"shape1"}, {}});
  g.add_node({"s2", "Shape", "", {"x"}, {"shape2"}, {}});
  g.add_node({"e1", "Exp", "", {"x"}, {"a"}, {}});
  g.add_node({"e2", "Exp", "", {"x"}, {"b"}, {}});
  g.add_node({"sum", "Add", "", {"a", "b"}, {"y"}, {}});
  g.add_node({"d1", "Dropout", "", {"x", "ratio", "train"}, {"d1_out"}, {}});
  g.add_node({"d2", "Dropout", "", {"x", "ratio", "train"}, {"d2_out"}, {}});
  g.add_node({"cat", "Concat", "", {"shape1", "shape2"}, {"shapes"}, {{"axis", Attribute::of_int(0)}}});
  g.add_node({"e3", "Exp", "", {"x"}, {"visible"}, {}});  // same as e1, but a graph output
  g.outputs = {"y", "d1_out", "d2_out", "shapes", "visible"};
  EXPECT_TRUE(eliminate_common_subexpressions(g));
  EXPECT_EQ(count_ops(g, "Shape"), 1);
  EXPECT_EQ(count_ops(g, "Exp"), 2);  // e1 and the output-producing e3
  EXPECT_EQ(count_ops(g, "Dropout"), 2);
  for (const auto& n : g.nodes) {
    if (n.name == "sum") {
      EXPECT_EQ(n.inputs, (std::vector<std::string>{"a", "a"}));
    }
    if (n.name == "cat") {
      EXPECT_EQ(n.inputs, (std::vector<std::string>{"shape1", "shape1"}));
    }
  }
}

TEST(CommonSubexpressions, KeepsForwardAndBackwardCopiesApart) {
  Graph g;
  add_input(g, "x", DType::Float32, {3});
  g.add_node({"f", "Exp", "", {"x"}, {"a"}, {}});
  Node b{"b", "Exp", "", {"x"}, {"c"}, {}};
  b.in_backward = true;  // merging would make the backward read a forward value: a bigger stash
  g.add_node(b);
  g.add_node({"sum", "Add", "", {"a", "c"}, {"y"}, {}});
  g.outputs = {"y"};
  EXPECT_FALSE(eliminate_common_subexpressions(g));
}

TEST(ConstantFolding, FoldsConstantsAndStaticShapes) {
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 6});
  g.add_initializer("two", Tensor::from_vector<int64_t>({2}, {1}));
  g.add_initializer("three", Tensor::from_vector<int64_t>({3}, {1}));
  g.add_initializer("one_idx", Tensor::from_vector<int64_t>({1}, {1}));
  g.add_initializer("zero_idx", Tensor::from_vector<int64_t>({0}, {1}));
  g.add_node({"mul", "Mul", "", {"two", "three"}, {"six"}, {}});
  g.add_node({"shape", "Shape", "", {"x"}, {"sx"}, {}});
  g.add_node({"width", "Gather", "", {"sx", "one_idx"}, {"w"}, {{"axis", Attribute::of_int(0)}}});
  g.add_node({"batch", "Gather", "", {"sx", "zero_idx"}, {"b"}, {{"axis", Attribute::of_int(0)}}});
  g.add_node({"halves", "Div", "", {"w", "two"}, {"half"}, {}});
  g.add_node({"target", "Concat", "", {"b", "half", "six"}, {"target_shape"}, {{"axis", Attribute::of_int(0)}}});
  g.outputs = {"target_shape"};
  EXPECT_TRUE(fold_constants(g));
  ASSERT_TRUE(g.is_initializer("six") && g.is_initializer("w") && g.is_initializer("half"));
  EXPECT_EQ(g.initializers.at("six").to_int64_vector(), std::vector<int64_t>({6}));
  EXPECT_EQ(g.initializers.at("half").to_int64_vector(), std::vector<int64_t>({3}));
  EXPECT_FALSE(g.is_initializer("b"));  // the batch dim is symbolic: computed at run time
  EXPECT_EQ(count_ops(g, "Gather"), 1);
  EXPECT_EQ(count_ops(g, "Concat"), 1);  // a graph output keeps its node
  eliminate_dead_nodes(g);
  EXPECT_FALSE(g.is_initializer("two") && g.is_initializer("one_idx"));
}

TEST(CleanupPasses, ComputeTheSameNumbers) {
  // x [B, 6] -> Reshape to [B, 2, 3] through shape arithmetic, Exp twice (merged), a dead branch.
  Graph g;
  add_input(g, "x", DType::Float64, {-1, 6});
  g.add_initializer("idx0", Tensor::from_vector<int64_t>({0}, {1}));
  g.add_initializer("two_three", Tensor::from_vector<int64_t>({2, 3}, {2}));
  g.add_node({"shape", "Shape", "", {"x"}, {"sx"}, {}});
  g.add_node({"batch", "Gather", "", {"sx", "idx0"}, {"b"}, {{"axis", Attribute::of_int(0)}}});
  g.add_node({"target", "Concat", "", {"b", "two_three"}, {"t"}, {{"axis", Attribute::of_int(0)}}});
  g.add_node({"reshape", "Reshape", "", {"x", "t"}, {"r"}, {}});
  g.add_node({"exp1", "Exp", "", {"r"}, {"e1"}, {}});
  g.add_node({"exp2", "Exp", "", {"r"}, {"e2"}, {}});
  g.add_node({"mul", "Mul", "", {"e1", "e2"}, {"y"}, {}});
  g.add_node({"dead", "Sin", "", {"x"}, {"unused"}, {}});
  g.outputs = {"y"};
  expect_same_numbers(g, {random_tensor(DType::Float64, {4, 6}, 1)});
}

TEST(OptimizationLevel, ZeroRunsNoPassAndTheEnvironmentSetsTheDefault) {
  const char* original = std::getenv("ONNXTRAIN_OPT_LEVEL");
  const std::string saved = original ? original : "";
  EXPECT_EQ(resolve_opt_level(0), 0);
  EXPECT_EQ(resolve_opt_level(2), 2);
  unsetenv("ONNXTRAIN_OPT_LEVEL");
  EXPECT_EQ(resolve_opt_level(-1), 1);
  setenv("ONNXTRAIN_OPT_LEVEL", "0", 1);
  EXPECT_EQ(resolve_opt_level(-1), 0);
  Graph g;
  add_input(g, "x", DType::Float32, {2});
  g.add_node({"a", "Exp", "", {"x"}, {"a_out"}, {}});
  g.add_node({"b", "Exp", "", {"x"}, {"b_out"}, {}});
  g.add_node({"s", "Add", "", {"a_out", "b_out"}, {"y"}, {}});
  g.outputs = {"y"};
  Graph copy = g;
  optimize_before_autodiff(copy, -1);
  EXPECT_EQ(count_ops(copy, "Exp"), 2);
  setenv("ONNXTRAIN_OPT_LEVEL", "bad", 1);
  EXPECT_THROW(resolve_opt_level(-1), Error);
  unsetenv("ONNXTRAIN_OPT_LEVEL");
  optimize_before_autodiff(copy, -1);
  EXPECT_EQ(count_ops(copy, "Exp"), 1);
  if (original) setenv("ONNXTRAIN_OPT_LEVEL", saved.c_str(), 1);
}

}  // namespace
}  // namespace onnxtrain::testing
