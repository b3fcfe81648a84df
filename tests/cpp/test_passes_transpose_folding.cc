// Transposes folded into matrix products: structure (the Transpose is gone, the flag set) and
// numbers (forward and gradients as without the pass), for MatMul on 2-D and batched operands,
// Gemm, and FusedMatMul whose flag is already set.
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

TEST(TransposeFolding, AWeightTransposeBecomesTransB) {
  Graph g;
  add_input(g, "x", DType::Float64, {-1, 5, 4});
  add_input(g, "w", DType::Float64, {3, 4});
  g.add_node({"t", "Transpose", "", {"w"}, {"wt"}, {{"perm", ints({1, 0})}}});
  g.add_node({"mm", "MatMul", "", {"x", "wt"}, {"y"}, {}});
  g.outputs = {"y"};
  Graph folded = g;
  EXPECT_TRUE(fold_transposes_into_matmul(folded));
  eliminate_dead_nodes(folded);
  EXPECT_EQ(count_ops(folded, "Transpose"), 0);
  ASSERT_EQ(folded.nodes.size(), 1u);
  EXPECT_EQ(folded.nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(folded.nodes[0].attr_int("transB", 0), 1);
  EXPECT_EQ(folded.nodes[0].inputs[1], "w");
  // A GEMM with a transposed operand may round in another order: 1e-12 in float64.
  expect_same_numbers(g, {random_tensor(DType::Float64, {2, 5, 4}, 1), random_tensor(DType::Float64, {3, 4}, 2)},
                      1e-12);
}

TEST(TransposeFolding, BatchedLastTwoSwapsAndGemmAndExistingFlags) {
  Graph g;
  add_input(g, "q", DType::Float64, {2, 3, 5, 4});
  add_input(g, "k", DType::Float64, {2, 3, 6, 4});
  add_input(g, "a", DType::Float64, {4, 5});
  add_input(g, "b", DType::Float64, {4, 6});
  add_input(g, "c", DType::Float64, {6, 3});
  g.add_node({"kt", "Transpose", "", {"k"}, {"k_t"}, {{"perm", ints({0, 1, 3, 2})}}});
  g.add_node({"scores", "MatMul", "", {"q", "k_t"}, {"s"}, {}});
  g.add_node({"at", "Transpose", "", {"a"}, {"a_t"}, {}});  // default perm: reversed, rank 2
  g.add_node({"gemm", "Gemm", "", {"a_t", "b"}, {"ab"}, {{"alpha", Attribute::of_float(0.5f)}}});
  g.add_node({"ct", "Transpose", "", {"c"}, {"c_t"}, {{"perm", ints({1, 0})}}});
  g.add_node({"fused", "FusedMatMul", kOnnxTrainDomain, {"ab", "c_t"}, {"abc"}, {{"transB", Attribute::of_int(1)}}});
  g.outputs = {"s", "ab", "abc"};
  g.opsets[kOnnxTrainDomain] = 1;
  Graph folded = g;
  EXPECT_TRUE(fold_transposes_into_matmul(folded));
  eliminate_dead_nodes(folded);
  EXPECT_EQ(count_ops(folded, "Transpose"), 0);
  for (const auto& n : folded.nodes) {
    if (n.name == "scores") {
      EXPECT_EQ(n.attr_int("transB", 0), 1);
    }
    if (n.name == "gemm") {
      EXPECT_EQ(n.attr_int("transA", 0), 1);
    }
    if (n.name == "fused") {
      EXPECT_EQ(n.attr_int("transB", 1), 0);  // two transposes cancel
    }
  }
  expect_same_numbers(g, {random_tensor(DType::Float64, {2, 3, 5, 4}, 3), random_tensor(DType::Float64, {2, 3, 6, 4}, 4),
                          random_tensor(DType::Float64, {4, 5}, 5), random_tensor(DType::Float64, {4, 6}, 6),
                          random_tensor(DType::Float64, {6, 3}, 7)},
                      1e-12);
}

TEST(TransposeFolding, OtherPermutationsStay) {
  Graph g;
  add_input(g, "x", DType::Float32, {2, 3, 4});
  add_input(g, "w", DType::Float32, {2, 4, 5});
  g.add_node({"t", "Transpose", "", {"x"}, {"xt"}, {{"perm", ints({1, 0, 2})}}});  // moves the batch axis
  g.add_node({"mm", "MatMul", "", {"xt", "w"}, {"y"}, {}});
  g.outputs = {"y"};
  EXPECT_FALSE(fold_transposes_into_matmul(g));
}

}  // namespace
}  // namespace onnxtrain::testing
