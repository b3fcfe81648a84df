// A bias row folded into the matrix product: structure (the Add is gone, FusedMatMul reads the
// bias) and numbers (forward and gradients as with the Add), plus the cases that must stay: a
// product read elsewhere, a bias that would broadcast the product to a new shape, a bias
// computed after the product.
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

TEST(MatmulBias, ALinearOnThreeDimensionalInputsBecomesOneProduct) {
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 7, 6});
  add_input(g, "w", DType::Float32, {6, 5});
  add_input(g, "b", DType::Float32, {5});
  g.add_node({"mm", "MatMul", "", {"x", "w"}, {"y"}, {}});
  g.value_info["y"] = {DType::Float32, std::vector<Dim>{Dim{-1, "n"}, Dim{7, ""}, Dim{5, ""}}};
  g.add_node({"add", "Add", "", {"b", "y"}, {"z"}, {}});  // the bias first: Add commutes
  g.outputs = {"z"};
  Graph fused = g;
  EXPECT_TRUE(fuse_matmul_bias(fused));
  ASSERT_EQ(fused.nodes.size(), 1u);
  EXPECT_EQ(fused.nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(fused.nodes[0].inputs, (std::vector<std::string>{"x", "w", "b"}));
  EXPECT_EQ(fused.nodes[0].outputs, (std::vector<std::string>{"z"}));
  EXPECT_FALSE(fuse_matmul_bias(fused));
  expect_same_numbers(g, {random_tensor(DType::Float32, {3, 7, 6}, 1), random_tensor(DType::Float32, {6, 5}, 2),
                          random_tensor(DType::Float32, {5}, 3)},
                      1e-6);
}

TEST(MatmulBias, ATransposedScaledProductAndAOneElementBias) {
  Graph g;
  add_input(g, "a", DType::Float64, {4, 3});
  add_input(g, "w", DType::Float64, {5, 3});
  add_input(g, "b", DType::Float64, {1});
  Node mm{"mm", "FusedMatMul", kOnnxTrainDomain, {"a", "w"}, {"y"},
          {{"transB", Attribute::of_int(1)}, {"alpha", Attribute::of_float(0.25f)}}};
  g.add_node(mm);
  g.value_info["y"] = {DType::Float64, std::vector<Dim>{Dim{4, ""}, Dim{5, ""}}};
  g.add_node({"add", "Add", "", {"y", "b"}, {"z"}, {}});
  g.outputs = {"z"};
  g.opsets[kOnnxTrainDomain] = 1;
  Graph fused = g;
  EXPECT_TRUE(fuse_matmul_bias(fused));
  ASSERT_EQ(fused.nodes.size(), 1u);
  EXPECT_EQ(fused.nodes[0].attr_int("transB", 0), 1);
  EXPECT_FLOAT_EQ(fused.nodes[0].attr_float("alpha", 1), 0.25f);
  expect_same_numbers(g, {random_tensor(DType::Float64, {4, 3}, 4), random_tensor(DType::Float64, {5, 3}, 5),
                          random_tensor(DType::Float64, {1}, 6)},
                      1e-14);
}

TEST(MatmulBias, StaysWhenTheAddIsNotABiasRowOfAnUnreadProduct) {
  Graph g;
  add_input(g, "x", DType::Float32, {4, 6});
  add_input(g, "w", DType::Float32, {6, 1});
  add_input(g, "wide", DType::Float32, {5});  // broadcasts [4, 1] to [4, 5]: a new shape
  add_input(g, "v", DType::Float32, {6, 5});
  add_input(g, "row", DType::Float32, {5});
  g.add_node({"narrow", "MatMul", "", {"x", "w"}, {"n"}, {}});
  g.value_info["n"] = {DType::Float32, std::vector<Dim>{Dim{4, ""}, Dim{1, ""}}};
  g.add_node({"add_wide", "Add", "", {"n", "wide"}, {"nw"}, {}});
  g.add_node({"shared", "MatMul", "", {"x", "v"}, {"s"}, {}});
  g.value_info["s"] = {DType::Float32, std::vector<Dim>{Dim{4, ""}, Dim{5, ""}}};
  g.add_node({"add_shared", "Add", "", {"s", "row"}, {"sr"}, {}});
  g.add_node({"late", "MatMul", "", {"x", "v"}, {"l"}, {}});
  g.value_info["l"] = {DType::Float32, std::vector<Dim>{Dim{4, ""}, Dim{5, ""}}};
  g.add_node({"late_bias", "Neg", "", {"row"}, {"lb"}, {}});
  g.value_info["lb"] = {DType::Float32, std::vector<Dim>{Dim{5, ""}}};
  g.add_node({"add_late", "Add", "", {"l", "lb"}, {"ll"}, {}});
  g.outputs = {"nw", "sr", "s", "ll"};  // s is read by its Add and is a graph output
  EXPECT_FALSE(fuse_matmul_bias(g));
}

}  // namespace
}  // namespace onnxtrain::testing
