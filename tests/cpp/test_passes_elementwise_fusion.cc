// Elementwise fusion: structure (which nodes become one FusedElementwise, which values stay
// visible, what must not merge) and numbers (the fused loop computes exactly what the op-by-op
// graph computes, forward and backward, float32 transcendentals included).
#include <cmath>
#include <set>

#include "core/half.h"
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

const Node* find_op(const Graph& g, const std::string& op_type) {
  for (const auto& n : g.nodes)
    if (n.op_type == op_type) return &n;
  return nullptr;
}

TEST(ElementwiseFusion, ABiasActivationScaleChainBecomesOneLoop) {
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 6});
  add_input(g, "bias", DType::Float32, {6});
  add_input(g, "scale", DType::Float32, {});
  g.add_node({"add", "Add", "", {"x", "bias"}, {"a"}, {}});
  g.add_node({"relu", "Relu", "", {"a"}, {"r"}, {}});
  g.add_node({"mul", "Mul", "", {"r", "scale"}, {"y"}, {}});
  g.outputs = {"y"};
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  ASSERT_EQ(fused.nodes.size(), 1u);
  const Node& n = fused.nodes[0];
  EXPECT_EQ(n.op_type, "FusedElementwise");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "bias", "scale"}));
  EXPECT_EQ(n.outputs, (std::vector<std::string>{"y"}));  // a and r never reach memory
  EXPECT_EQ(n.attr_strings("ops"), (std::vector<std::string>{"Add", "Relu", "Mul"}));
  EXPECT_FALSE(fuse_elementwise(fused));
  // Rows longer than one block, and a row count that does not split evenly.
  expect_same_numbers(g, {random_tensor(DType::Float32, {1037, 6}, 1), random_tensor(DType::Float32, {6}, 2),
                          random_tensor(DType::Float32, {}, 3)});
}

TEST(ElementwiseFusion, TranscendentalsMatchTheirStandaloneKernelsBitForBit) {
  Graph g;
  add_input(g, "x", DType::Float32, {3, 700});
  const char* chain[] = {"Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Sqrt", "Log", "Reciprocal"};
  std::string prev = "x";
  for (const char* op : chain) {
    const std::string out = std::string("v_") + op;
    g.add_node({op, op, "", {prev}, {out}, {}});
    prev = out;
  }
  Node gelu{"gelu", "Gelu", kOnnxTrainDomain, {prev}, {"g"}, {}};
  gelu.attrs["approximate"] = Attribute::of_string("tanh");
  g.add_node(gelu);
  g.add_node({"leaky", "LeakyRelu", "", {"g"}, {"y"}, {{"alpha", Attribute::of_float(0.2f)}}});
  g.outputs = {"y", "v_Tanh"};
  g.opsets[kOnnxTrainDomain] = 1;
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  ASSERT_EQ(fused.nodes.size(), 1u);
  EXPECT_EQ(fused.nodes[0].outputs, (std::vector<std::string>{"v_Tanh", "y"}));
  expect_same_numbers(g, {random_tensor(DType::Float32, {3, 700}, 4, -3, 3)});
}

TEST(ElementwiseFusion, SiluFusesAndMatchesItsStandaloneKernel) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    add_input(g, "x", dtype, {3, 701});
    g.add_node({"silu", "Silu", kOnnxTrainDomain, {"x"}, {"s"}, {}});
    g.add_node({"add", "Add", "", {"s", "x"}, {"y"}, {}});
    g.outputs = {"y"};
    g.opsets[kOnnxTrainDomain] = 1;
    Graph fused = g;
    EXPECT_TRUE(fuse_elementwise(fused));
    ASSERT_EQ(fused.nodes.size(), 1u);
    // Past +-20 the float32 sigmoid saturates: both tails are in the range.
    expect_same_numbers(g, {random_tensor(dtype, {3, 701}, 9, -25, 25)});
  }
}

TEST(ElementwiseFusion, SiluGradFusesAndMatchesItsStandaloneKernel) {
  // SiluGrad has no gradient of its own, so only the forward run is compared.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    add_input(g, "dy", dtype, {3, 701});
    add_input(g, "x", dtype, {3, 701});
    g.add_node({"grad", "SiluGrad", kOnnxTrainDomain, {"dy", "x"}, {"d"}, {}});
    g.add_node({"mul", "Mul", "", {"d", "x"}, {"y"}, {}});
    g.outputs = {"y"};
    g.opsets[kOnnxTrainDomain] = 1;
    Graph fused = g;
    EXPECT_TRUE(fuse_elementwise(fused));
    ASSERT_EQ(fused.nodes.size(), 1u);
    const std::vector<Tensor> feeds = {random_tensor(dtype, {3, 701}, 10), random_tensor(dtype, {3, 701}, 11, -25, 25)};
    InferenceSession off(g, false, 0), on(g, false, 1);
    EXPECT_EQ(max_difference(off.run(feeds, 3)[0], on.run(feeds, 3)[0]), 0);
  }
}

// Relu6 after a bias, and its gradient into the next one: HardTanh carries both bounds, so the
// fused node has a second immediate per instruction. Values at the bounds and NaN are fed too.
TEST(ElementwiseFusion, HardTanhAndItsGradientFuseWithBothBounds) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    add_input(g, "x", dtype, {3, 701});
    add_input(g, "bias", dtype, {701});
    add_input(g, "dy", dtype, {3, 701});
    Node clamp{"relu6", "HardTanh", kOnnxTrainDomain, {"a"}, {"r"}, {}};
    clamp.attrs["min_val"] = Attribute::of_float(0.0f);
    clamp.attrs["max_val"] = Attribute::of_float(6.0f);
    Node grad{"relu6_grad", "HardTanhGrad", kOnnxTrainDomain, {"dy", "r"}, {"d"}, clamp.attrs};
    g.add_node({"add", "Add", "", {"x", "bias"}, {"a"}, {}});
    g.add_node(clamp);
    g.add_node(grad);
    g.add_node({"scale", "Mul", "", {"d", "x"}, {"y"}, {}});
    g.outputs = {"y", "r"};
    g.opsets[kOnnxTrainDomain] = 1;
    Graph fused = g;
    EXPECT_TRUE(fuse_elementwise(fused));
    ASSERT_EQ(fused.nodes.size(), 1u);
    const Node& n = fused.nodes[0];
    ASSERT_TRUE(n.has_attr("consts2"));
    EXPECT_EQ(n.attr_floats("consts")[1], 0.0f);
    EXPECT_EQ(n.attr_floats("consts2")[1], 6.0f);
    Tensor x = random_tensor(dtype, {3, 701}, 12, -3, 9);
    Tensor bias = Tensor::zeros(dtype, TensorShape({701}));
    for (int64_t i = 0; i < 701; i += 7) {
      const double v = i % 3 == 0 ? 0.0 : i % 3 == 1 ? 6.0 : std::nan("");
      if (dtype == DType::Float32) x.data<float>()[i] = static_cast<float>(v);
      else x.data<double>()[i] = v;
    }
    const std::vector<Tensor> feeds = {x, bias, random_tensor(dtype, {3, 701}, 13)};
    InferenceSession off(g, false, 0), on(g, false, 1);
    const std::vector<Tensor> a = off.run(feeds, 3), b = on.run(feeds, 3);
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].numel(), b[k].numel());
      int nans = 0;
      for (int64_t i = 0; i < a[k].numel(); ++i) {
        const double u = a[k].item_as_double(i), v = b[k].item_as_double(i);
        nans += std::isnan(u);
        if (std::isnan(u) || std::isnan(v)) EXPECT_TRUE(std::isnan(u) && std::isnan(v)) << "output " << k << "[" << i << "]";
        else EXPECT_EQ(u, v) << "output " << k << "[" << i << "]";
      }
      EXPECT_GT(nans, 0) << "output " << k << ": NaN must reach it";  // r keeps NaN; d is 0 there, y = 0 * NaN
    }
  }
}

TEST(ElementwiseFusion, ValuesReadOutsideTheChainStayOutputs) {
  Graph g;
  add_input(g, "x", DType::Float64, {4, 5});
  add_input(g, "w", DType::Float64, {5, 3});
  g.add_node({"exp", "Exp", "", {"x"}, {"e"}, {}});
  g.add_node({"neg", "Neg", "", {"e"}, {"ne"}, {}});
  g.add_node({"mm", "MatMul", "", {"e", "w"}, {"m"}, {}});  // reads the chain's first value
  g.add_node({"tanh", "Tanh", "", {"ne"}, {"y"}, {}});
  g.outputs = {"y", "m"};
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  const Node* n = find_op(fused, "FusedElementwise");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->outputs, (std::vector<std::string>{"e", "y"}));
  EXPECT_EQ(count_ops(fused, "MatMul"), 1);
  expect_same_numbers(g, {random_tensor(DType::Float64, {4, 5}, 5), random_tensor(DType::Float64, {5, 3}, 6)});
}

TEST(ElementwiseFusion, NeverJoinsANodeThatReadsAValueComputedFromTheGroup) {
  // u feeds a MatMul whose result comes back: putting z's Add into u's group would make the
  // fused node read its own descendant.
  Graph g;
  add_input(g, "x", DType::Float64, {4, 4});
  add_input(g, "w", DType::Float64, {4, 4});
  g.add_node({"a1", "Add", "", {"x", "x"}, {"u0"}, {}});
  g.add_node({"r1", "Relu", "", {"u0"}, {"u"}, {}});
  g.add_node({"mm", "MatMul", "", {"u", "w"}, {"m"}, {}});
  g.value_info["m"].dtype = DType::Float64;
  g.add_node({"a2", "Add", "", {"u", "m"}, {"z"}, {}});
  g.add_node({"r2", "Relu", "", {"z"}, {"y"}, {}});
  g.outputs = {"y"};
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  EXPECT_EQ(count_ops(fused, "FusedElementwise"), 2);
  // The order stays valid: every input is produced before it is read.
  std::set<std::string> defined{"x", "w"};
  for (const auto& node : fused.nodes) {
    for (const auto& in : node.inputs) EXPECT_TRUE(defined.count(in)) << node.name << " reads " << in << " early";
    for (const auto& out : node.outputs) defined.insert(out);
  }
  expect_same_numbers(g, {random_tensor(DType::Float64, {4, 4}, 7), random_tensor(DType::Float64, {4, 4}, 8)});
}

TEST(ElementwiseFusion, KeepsPhasesAndElementTypesApart) {
  Graph g;
  add_input(g, "x", DType::Float32, {8});
  add_input(g, "d", DType::Float64, {8});
  add_input(g, "i", DType::Int64, {8});
  g.add_node({"f1", "Exp", "", {"x"}, {"a"}, {}});
  Node backward{"b1", "Neg", "", {"a"}, {"b"}, {}};
  backward.in_backward = true;
  g.add_node(backward);
  g.add_node({"d1", "Exp", "", {"d"}, {"e"}, {}});
  g.add_node({"d2", "Neg", "", {"e"}, {"f"}, {}});
  g.add_node({"i1", "Add", "", {"i", "i"}, {"j"}, {}});
  g.add_node({"i2", "Mul", "", {"j", "i"}, {"k"}, {}});
  g.outputs = {"b", "f", "k"};
  EXPECT_TRUE(fuse_elementwise(g));
  EXPECT_EQ(count_ops(g, "FusedElementwise"), 1);  // only the float64 pair
  EXPECT_EQ(find_op(g, "FusedElementwise")->inputs, (std::vector<std::string>{"d"}));
  EXPECT_EQ(count_ops(g, "Exp"), 1);
  EXPECT_EQ(count_ops(g, "Add"), 1);
}

// On 16-bit floats a lone op becomes a fused node too: its values are read into float32
// registers and rounded once when written, where the op's own kernel would run on float32 copies.
// A chain rounds only its outputs, so it lands within one rounding step of the exact value.
TEST(ElementwiseFusion, SixteenBitFloatsFuseEvenALoneOpAndRoundOnlyTheOutputs) {
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int mantissa_bits = dtype == DType::BFloat16 ? 7 : 10;
    Graph g;
    add_input(g, "x", dtype, {5, 700});
    add_input(g, "bias", dtype, {700});
    g.add_node({"relu", "Relu", "", {"x"}, {"r"}, {}});
    g.add_node({"add", "Add", "", {"x", "bias"}, {"a"}, {}});
    g.add_node({"gelu", "Gelu", kOnnxTrainDomain, {"a"}, {"y"}, {}});
    g.outputs = {"r", "y"};
    g.opsets[kOnnxTrainDomain] = 1;
    Graph fused = g;
    EXPECT_TRUE(fuse_elementwise(fused));
    EXPECT_EQ(count_ops(fused, "FusedElementwise"), 2);
    EXPECT_EQ(count_ops(fused, "Relu"), 0);

    const Tensor x32 = random_tensor(DType::Float32, {5, 700}, 21, -4, 4);
    const Tensor bias32 = random_tensor(DType::Float32, {700}, 22, -1, 1);
    auto narrowed = [&](const Tensor& t) {
      Tensor out = Tensor::empty(dtype, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (dtype == DType::BFloat16) out.data<BHalf>()[i] = float_to_bfloat16(t.data<float>()[i]);
        else out.data<Half>()[i] = float_to_half(t.data<float>()[i]);
      }
      return out;
    };
    const Tensor x = narrowed(x32), bias = narrowed(bias32);
    const auto unfused = InferenceSession(g, false, 0).run({x, bias}, 0);
    const auto optimized = InferenceSession(g, false, 1).run({x, bias}, 0);
    ASSERT_EQ(optimized[0].dtype(), dtype);
    ASSERT_EQ(optimized[1].dtype(), dtype);
    EXPECT_EQ(max_difference(unfused[0], optimized[0]), 0.0);  // relu rounds nothing
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double a = x.item_as_double(i) + bias.item_as_double(i % 700);
      const double exact = 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
      const double step = std::ldexp(1.0, std::ilogb(exact == 0 ? 1e-30 : exact) - mantissa_bits);
      ASSERT_LE(std::fabs(optimized[1].item_as_double(i) - exact), step + 1e-6 * std::fabs(a))
          << "element " << i << " of gelu(x + bias), x + bias = " << a;
    }
  }
}

TEST(ElementwiseFusion, AnOutputNarrowerThanTheLoopIsComputedAtItsOwnShape) {
  // t = a * b broadcasts [1, 5] with [1, 5]; only then does it meet the full [6, 5] operand.
  // t is visible, so the kernel must write it at [1, 5], not at the loop's shape.
  Graph g;
  add_input(g, "a", DType::Float64, {1, 5});
  add_input(g, "b", DType::Float64, {1, 5});
  add_input(g, "x", DType::Float64, {6, 5});
  g.add_node({"mul", "Mul", "", {"a", "b"}, {"t"}, {}});
  g.add_node({"add", "Add", "", {"t", "x"}, {"s"}, {}});
  g.add_node({"sig", "Sigmoid", "", {"s"}, {"y"}, {}});
  g.outputs = {"y", "t"};
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  EXPECT_EQ(count_ops(fused, "FusedElementwise"), 1);
  expect_same_numbers(g, {random_tensor(DType::Float64, {1, 5}, 9), random_tensor(DType::Float64, {1, 5}, 10),
                          random_tensor(DType::Float64, {6, 5}, 11)});
}

TEST(ElementwiseFusion, ChainsThatShareOnlyAnOperandNeedNotBroadcastTogether) {
  // As torch 2.x exports attention's scaling: sqrt(scale) multiplies q [2, 3, 4] and k^T [2, 4, 3],
  // whose shapes do not broadcast with each other. The group holds both products.
  Graph g;
  add_input(g, "scale", DType::Float64, {1});
  add_input(g, "q", DType::Float64, {2, 3, 4});
  add_input(g, "kt", DType::Float64, {2, 4, 3});
  g.add_node({"sqrt", "Sqrt", "", {"scale"}, {"root"}, {}});
  g.add_node({"mul_q", "Mul", "", {"q", "root"}, {"q_scaled"}, {}});
  g.add_node({"mul_k", "Mul", "", {"kt", "root"}, {"k_scaled"}, {}});
  g.outputs = {"q_scaled", "k_scaled"};
  Graph fused = g;
  EXPECT_TRUE(fuse_elementwise(fused));
  EXPECT_EQ(count_ops(fused, "FusedElementwise"), 1);
  expect_same_numbers(g, {random_tensor(DType::Float64, {1}, 12, 0.5, 2.0), random_tensor(DType::Float64, {2, 3, 4}, 13),
                          random_tensor(DType::Float64, {2, 4, 3}, 14)});
}

TEST(ElementwiseFusion, BackwardChainsFuseInATrainingGraph) {
  Graph g;
  add_input(g, "x", DType::Float32, {16, 40});
  add_input(g, "bias", DType::Float32, {40});
  g.add_node({"add", "Add", "", {"x", "bias"}, {"a"}, {}});
  g.add_node({"sig", "Sigmoid", "", {"a"}, {"s"}, {}});
  g.add_node({"tanh", "Tanh", "", {"s"}, {"y"}, {}});
  g.outputs = {"y"};
  TrainingSession session(g, {{"x", "bias"}, {}, false, 1});
  const Graph& joint = session.training_graph().graph;
  int forward = 0, backward = 0;
  for (const auto& n : joint.nodes)
    if (n.op_type == "FusedElementwise") (n.in_backward ? backward : forward) += 1;
  EXPECT_EQ(forward, 1);
  EXPECT_GE(backward, 1);  // TanhGrad and SigmoidGrad in one loop
  EXPECT_EQ(count_ops(joint, "TanhGrad"), 0);
  expect_same_numbers(g, {random_tensor(DType::Float32, {16, 40}, 12), random_tensor(DType::Float32, {40}, 13)});
}

TEST(ElementwiseFusion, AMalformedProgramIsRefusedWithItsReason) {
  Graph g;
  add_input(g, "x", DType::Float32, {4});
  Node n{"bad", "FusedElementwise", kOnnxTrainDomain, {"x"}, {"y"}, {}};
  n.attrs["ops"] = Attribute::of_strings({"Add"});
  n.attrs["args"] = Attribute::of_ints({0, 1});   // register 1 is this instruction's own output
  n.attrs["consts"] = Attribute::of_floats({0});
  n.attrs["outputs"] = Attribute::of_ints({1});
  g.add_node(n);
  g.outputs = {"y"};
  g.opsets[kOnnxTrainDomain] = 1;
  try {
    InferenceSession session(g, false, 0);
    session.run({random_tensor(DType::Float32, {4}, 14)}, 1);
    FAIL() << "a program reading an undefined register ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("not defined before it"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onnxtrain::testing
