// Casts folded away: structure (which Casts go, which stay) and numbers (outputs and gradients
// exactly as without the pass).
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

Attribute to(DType t) { return Attribute::of_int(static_cast<int64_t>(t)); }

bool reads(const Graph& g, const std::string& node_name, const std::string& value) {
  for (const Node& n : g.nodes)
    if (n.name == node_name) return !n.inputs.empty() && n.inputs[0] == value;
  ADD_FAILURE() << "no node " << node_name;
  return false;
}

void declare(Graph& g, const std::string& value, DType t) { g.value_info[value].dtype = t; }

TEST(CastFolding, IdentitiesAndExactRoundTripsGo) {
  Graph g;
  add_input(g, "x", DType::Float32, {2, 3});
  add_input(g, "h", DType::BFloat16, {2, 3});
  g.add_node({"same", "Cast", "", {"x"}, {"x_same"}, {{"to", to(DType::Float32)}}});
  g.add_node({"relu", "Relu", "", {"x_same"}, {"a"}, {}});
  g.add_node({"widen", "Cast", "", {"h"}, {"h32"}, {{"to", to(DType::Float32)}}});
  g.add_node({"back", "Cast", "", {"h32"}, {"h16"}, {{"to", to(DType::BFloat16)}}});
  g.add_node({"neg", "Neg", "", {"h16"}, {"b"}, {}});
  declare(g, "x_same", DType::Float32);
  declare(g, "h32", DType::Float32);
  declare(g, "h16", DType::BFloat16);
  g.outputs = {"a", "b"};
  EXPECT_TRUE(fold_casts(g));
  eliminate_dead_nodes(g);
  EXPECT_EQ(count_ops(g, "Cast"), 0);
  EXPECT_TRUE(reads(g, "relu", "x"));
  EXPECT_TRUE(reads(g, "neg", "h"));
  EXPECT_FALSE(fold_casts(g));
}

TEST(CastFolding, RoundingCastsAndNamedOutputsStay) {
  Graph g;
  add_input(g, "x", DType::Float32, {4});
  g.add_node({"narrow", "Cast", "", {"x"}, {"x16"}, {{"to", to(DType::BFloat16)}}});
  g.add_node({"wide", "Cast", "", {"x16"}, {"x32"}, {{"to", to(DType::Float32)}}});  // rounds: not x
  g.add_node({"out", "Cast", "", {"x"}, {"y"}, {{"to", to(DType::Float32)}}});        // a graph output
  g.add_node({"abs", "Abs", "", {"x32"}, {"z"}, {}});
  declare(g, "x16", DType::BFloat16);
  declare(g, "x32", DType::Float32);
  declare(g, "y", DType::Float32);
  g.outputs = {"y", "z"};
  EXPECT_FALSE(fold_casts(g));
  EXPECT_EQ(count_ops(g, "Cast"), 3);
}

// float64 -> float32 -> float64 rounds and must stay; float32 -> float64 -> float32 and an
// identity Cast go. The optimized graph's outputs and gradients are the unoptimized one's, bit
// for bit (folding the rounding pair would fail this).
TEST(CastFolding, SameNumbersForwardAndBackward) {
  Graph g;
  add_input(g, "x", DType::Float32, {3, 4});
  add_input(g, "d", DType::Float64, {3, 4});
  g.add_node({"up", "Cast", "", {"x"}, {"x64"}, {{"to", to(DType::Float64)}}});
  g.add_node({"down", "Cast", "", {"x64"}, {"x32"}, {{"to", to(DType::Float32)}}});
  g.add_node({"same", "Cast", "", {"x32"}, {"x32b"}, {{"to", to(DType::Float32)}}});
  g.add_node({"sq", "Mul", "", {"x32b", "x"}, {"a"}, {}});
  g.add_node({"round", "Cast", "", {"d"}, {"d32"}, {{"to", to(DType::Float32)}}});
  g.add_node({"unround", "Cast", "", {"d32"}, {"d64"}, {{"to", to(DType::Float64)}}});
  g.add_node({"dd", "Mul", "", {"d64", "d"}, {"b"}, {}});
  declare(g, "x64", DType::Float64);
  declare(g, "x32", DType::Float32);
  declare(g, "x32b", DType::Float32);
  declare(g, "d32", DType::Float32);
  declare(g, "d64", DType::Float64);
  g.outputs = {"a", "b"};
  Graph folded = g;
  EXPECT_TRUE(fold_casts(folded));
  eliminate_dead_nodes(folded);
  EXPECT_EQ(count_ops(folded, "Cast"), 2);  // round and unround
  expect_same_numbers(g, {random_tensor(DType::Float32, {3, 4}, 1), random_tensor(DType::Float64, {3, 4}, 2)}, 0);
}

}  // namespace
}  // namespace onnxtrain::testing
