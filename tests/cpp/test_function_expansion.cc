// Function expansion (src/onnx/function_expansion.cc): ops ONNX defines by a function body are
// replaced by the body's nodes, in the loader and in sessions over graphs built in code.
#include <gtest/gtest.h>

#include <set>

#include "onnx/function_expansion.h"
#include "onnx/model_io.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

Graph one_node_graph(Node node, int opset, const std::vector<std::pair<std::string, ValueInfo>>& inputs) {
  Graph g;
  g.opsets = {{"", opset}};
  for (const auto& [name, info] : inputs) {
    g.inputs.push_back(name);
    g.value_info[name] = info;
  }
  g.outputs = node.outputs;
  g.add_node(std::move(node));
  return g;
}

ValueInfo f32_shape(std::vector<int64_t> dims) {
  std::vector<Dim> d;
  for (int64_t v : dims) d.push_back({v, ""});
  return {DType::Float32, d};
}

// Every node name and every produced value appears once; every input is defined before use.
void expect_well_formed(Graph g) {
  std::set<std::string> names, values(g.inputs.begin(), g.inputs.end());
  for (const Node& n : g.nodes) {
    EXPECT_TRUE(names.insert(n.name).second) << "node name repeats: " << n.name;
    for (const auto& v : n.inputs) EXPECT_TRUE(v.empty() || values.count(v)) << n.describe() << " reads undefined '" << v << "'";
    for (const auto& v : n.outputs)
      if (!v.empty()) {
        EXPECT_TRUE(values.insert(v).second) << "value defined twice: " << v;
      }
  }
  for (const auto& out : g.outputs) EXPECT_TRUE(values.count(out)) << "graph output '" << out << "' lost";
  EXPECT_NO_THROW(g.sort_topologically());
}

size_t count_op(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

TEST(FunctionExpansion, MeanVarianceNormalizationBecomesPrimitiveOps) {
  Graph g = one_node_graph({"mvn", "MeanVarianceNormalization", "", {"x"}, {"y"}, {{"axes", Attribute::of_ints({0, 2})}}},
                           13, {{"x", f32_shape({2, 3, 4})}});
  ASSERT_TRUE(is_expandable_function("", "MeanVarianceNormalization", 13));
  expand_functions(g);
  EXPECT_EQ(count_op(g, "MeanVarianceNormalization"), 0u);
  ASSERT_GT(count_op(g, "ReduceMean"), 0u);
  for (const Node& n : g.nodes) {
    EXPECT_EQ(n.name.rfind("mvn/", 0), 0u) << "body node not named after its function node: " << n.name;
    // ref_attr_name="axes" resolved from the node, not left dangling or defaulted.
    if (n.op_type == "ReduceMean") {
      EXPECT_EQ(n.attr_ints("axes"), (std::vector<int64_t>{0, 2})) << n.describe();
    }
  }
  expect_well_formed(g);
}

TEST(FunctionExpansion, AttributeDefaultsComeFromTheSchema) {
  // MVN's axes default to [0, 2, 3]; HannWindow's periodic defaults to 1.
  Graph mvn = one_node_graph({"m", "MeanVarianceNormalization", "", {"x"}, {"y"}, {}}, 13, {{"x", f32_shape({2, 3, 2, 2})}});
  expand_functions(mvn);
  for (const Node& n : mvn.nodes)
    if (n.op_type == "ReduceMean") {
      EXPECT_EQ(n.attr_ints("axes"), (std::vector<int64_t>{0, 2, 3}));
    }
  for (int64_t periodic : {-1, 0}) {
    AttributeMap attrs;
    if (periodic >= 0) attrs["periodic"] = Attribute::of_int(periodic);
    Graph hann = one_node_graph({"w", "HannWindow", "", {"n"}, {"y"}, attrs}, 17, {{"n", {DType::Int64, std::vector<Dim>{}}}});
    expand_functions(hann);
    EXPECT_EQ(count_op(hann, "HannWindow"), 0u);
    bool found = false;
    for (const Node& n : hann.nodes)
      if (n.op_type == "Constant" && n.has_attr("value_int")) {
        EXPECT_EQ(n.attr_int("value_int", -7), periodic < 0 ? 1 : periodic);
        found = true;
      }
    EXPECT_TRUE(found) << "HannWindow's body lost its periodic constant";
    expect_well_formed(hann);
    // The window itself, through the kernels: symmetric Hann of 5 is 0, .5, 1, .5, 0.
    if (periodic == 0) {
      std::vector<Tensor> out = InferenceSession(hann).run({Tensor::scalar<int64_t>(5)}, 0);
      ASSERT_EQ(out[0].numel(), 5);
      const double want[] = {0, 0.5, 1, 0.5, 0};
      for (int i = 0; i < 5; ++i) EXPECT_NEAR(out[0].item_as_double(i), want[i], 1e-6) << i;
    }
  }
}

TEST(FunctionExpansion, BodyNamesDoNotCollideWithTheGraphs) {
  // Two MVN nodes and a graph value already called like a body value: all stay distinct.
  Graph g;
  g.opsets = {{"", 13}};
  g.inputs = {"x"};
  g.value_info["x"] = f32_shape({2, 3, 2, 2});
  g.add_node({"mvn", "MeanVarianceNormalization", "", {"x"}, {"mvn/X_RM"}, {}});
  g.add_node({"mvn2", "MeanVarianceNormalization", "", {"mvn/X_RM"}, {"y"}, {}});
  g.outputs = {"y", "mvn/X_RM"};
  expand_functions(g);
  EXPECT_EQ(count_op(g, "MeanVarianceNormalization"), 0u);
  expect_well_formed(g);
}

TEST(FunctionExpansion, OpsWithKernelsAreNeverExpanded) {
  // LayerNormalization and Softmax have function bodies in ONNX but kernels here.
  EXPECT_FALSE(is_expandable_function("", "LayerNormalization", 17));
  EXPECT_FALSE(is_expandable_function("", "Softmax", 13));
  EXPECT_FALSE(is_expandable_function("", "Relu", 14));  // no body at all
  Graph g = one_node_graph({"ln", "LayerNormalization", "", {"x", "s"}, {"y"}, {}}, 17,
                           {{"x", f32_shape({2, 4})}, {"s", f32_shape({4})}});
  expand_functions(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "LayerNormalization");
}

TEST(FunctionExpansion, LoaderExpandsAndSubgraphsAreExpandedOnACopy) {
  Graph branch;
  branch.name = "then";
  branch.add_node({"inner_mvn", "MeanVarianceNormalization", "", {"x"}, {"t"}, {}});
  branch.outputs = {"t"};
  branch.value_info["t"] = {DType::Float32, std::nullopt};
  Graph else_branch;
  else_branch.name = "else";
  else_branch.add_node({"id", "Identity", "", {"x"}, {"e"}, {}});
  else_branch.outputs = {"e"};
  else_branch.value_info["e"] = {DType::Float32, std::nullopt};
  Attribute then_attr, else_attr;
  then_attr.kind = else_attr.kind = Attribute::Kind::Graph;
  then_attr.g = std::make_shared<Graph>(branch);
  else_attr.g = std::make_shared<Graph>(else_branch);
  Graph g;
  g.opsets = {{"", 13}};
  g.inputs = {"x", "c"};
  g.value_info["x"] = f32_shape({2, 3, 2, 2});
  g.value_info["c"] = {DType::Bool, std::vector<Dim>{}};
  g.add_node({"if", "If", "", {"c"}, {"y"}, {{"then_branch", then_attr}, {"else_branch", else_attr}}});
  g.outputs = {"y"};

  Graph copy = g;
  expand_functions(copy);
  const Graph& expanded_branch = *copy.nodes[0].attrs.at("then_branch").g;
  EXPECT_EQ(count_op(expanded_branch, "MeanVarianceNormalization"), 0u);
  EXPECT_GT(count_op(expanded_branch, "ReduceMean"), 0u);
  EXPECT_EQ(expanded_branch.outputs, std::vector<std::string>{"t"});
  // The original's branch is shared with the copy until expansion, and must not have changed.
  EXPECT_EQ(count_op(*g.nodes[0].attrs.at("then_branch").g, "MeanVarianceNormalization"), 1u);

  Graph loaded = load_model(save_model(g));
  EXPECT_EQ(count_op(*loaded.nodes[0].attrs.at("then_branch").g, "MeanVarianceNormalization"), 0u);
  InferenceSession session(loaded);
  Tensor x = random_tensor(DType::Float32, {2, 3, 2, 2}, 3);
  std::vector<Tensor> y = session.run({x, Tensor::scalar<bool>(true)}, 0);
  // Per channel c, over axes 0, 2, 3: mean 0 and (population) variance 1.
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 4; ++k) {
        const double v = y[0].item_as_double((n * 3 + c) * 4 + k);
        sum += v;
        sq += v * v;
      }
    EXPECT_NEAR(sum / 8, 0, 1e-5);
    EXPECT_NEAR(sq / 8, 1, 1e-4);
  }
}

// L = sum(r * MVN(x)) over float32 kernels: the gradient the builder derives from the expanded
// body against central differences (in float32 the step must be large; MVN is smooth).
TEST(FunctionExpansion, MeanVarianceNormalizationTrainsWithFiniteDifferenceGradient) {
  Graph g = one_node_graph({"mvn", "MeanVarianceNormalization", "", {"x"}, {"y"}, {}}, 13, {{"x", f32_shape({2, 3, 2, 2})}});
  TrainingSession training(g, {{"x"}, {}, false});
  InferenceSession forward(g);
  Tensor x = random_tensor(DType::Float32, {2, 3, 2, 2}, 11, -2, 2);
  Tensor r = random_tensor(DType::Float32, {2, 3, 2, 2}, 12);
  std::vector<Tensor> outputs;
  auto call = training.forward({x}, 0, outputs);
  std::vector<Tensor> grads = training.backward(*call, {r});
  ASSERT_EQ(grads.size(), 1u);
  ASSERT_TRUE(grads[0].defined());
  auto loss = [&](const Tensor& in) {
    Tensor y = forward.run({in}, 0)[0];
    double l = 0;
    for (int64_t i = 0; i < y.numel(); ++i) l += y.item_as_double(i) * r.item_as_double(i);
    return l;
  };
  const double eps = 1e-2;
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor plus = x.clone(), minus = x.clone();
    plus.data<float>()[i] += static_cast<float>(eps);
    minus.data<float>()[i] -= static_cast<float>(eps);
    const double fd = (loss(plus) - loss(minus)) / (2 * eps);
    worst = std::max(worst, std::abs(fd - grads[0].item_as_double(i)));
    scale = std::max(scale, std::abs(fd));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 5e-3 * scale) << "the expanded MVN's gradient differs from finite differences";
}

}  // namespace
}  // namespace onnxtrain::testing
