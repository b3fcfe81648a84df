// If, Loop and sequences: closing bodies over the outer values they read, running them, and
// lowering torch's sequence patterns to tensor ops. Gradients: grad_cases_control.cc.
#include <gtest/gtest.h>

#include "onnx/sequence_lowering.h"
#include "onnx/subgraph_closure.h"
#include "ops/control/subgraph.h"
#include "passes/passes.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

Node make(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
          AttributeMap attrs = {}) {
  Node n;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.name = n.outputs[0];
  n.attrs = std::move(attrs);
  return n;
}

Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a;
  a.kind = Attribute::Kind::Graph;
  a.g = std::move(g);
  return a;
}

Node constant(const std::string& name, Tensor value) {
  return make("Constant", {}, {name}, {{"value", Attribute::of_tensor(std::move(value))}});
}

// y = cond ? x + w : x (the else branch returns an outer value as it is).
Graph if_graph() {
  auto then_branch = std::make_shared<Graph>();
  then_branch->add_node(make("Add", {"x", "w"}, {"sum"}));
  then_branch->outputs = {"sum"};
  auto else_branch = std::make_shared<Graph>();
  else_branch->outputs = {"x"};
  Graph g;
  g.inputs = {"cond", "x", "w"};
  g.value_info["cond"].dtype = DType::Bool;
  g.value_info["x"].dtype = g.value_info["w"].dtype = DType::Float32;
  g.add_node(make("If", {"cond"}, {"y"},
                  {{"then_branch", graph_attr(then_branch)}, {"else_branch", graph_attr(else_branch)}}));
  g.outputs = {"y"};
  return g;
}

TEST(SubgraphClosure, OuterValuesBecomeInputsOfTheNodeAndOfEveryBody) {
  Graph g = if_graph();
  close_subgraphs(g);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.domain, kOnnxTrainDomain);
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"cond", "x", "w"}));
  EXPECT_EQ(n.attr_int("num_captured", -1), 2);
  for (const char* key : {"then_branch", "else_branch"}) {
    const Graph& body = *n.attrs.at(key).g;
    EXPECT_EQ(body.inputs, (std::vector<std::string>{"x", "w"})) << key;
    EXPECT_TRUE(free_values(body).empty()) << key;
    EXPECT_FALSE(body.is_input(body.outputs[0])) << key << ": an output must be produced inside the body";
  }
  EXPECT_EQ(g.info("y")->dtype, DType::Float32);  // from the else branch, which returns x
}

TEST(SubgraphClosure, IfRunsTheBranchTheConditionPicks) {
  Tensor x = random_tensor(DType::Float32, {2, 3}, 1), w = random_tensor(DType::Float32, {2, 3}, 2);
  InferenceSession session(if_graph());
  Tensor taken = session.run({Tensor::scalar<bool>(true), x, w}, 0)[0];
  Tensor other = session.run({Tensor::scalar<bool>(false), x, w}, 0)[0];
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_FLOAT_EQ(static_cast<float>(taken.item_as_double(i)), x.data<float>()[i] + w.data<float>()[i]);
    EXPECT_EQ(other.item_as_double(i), x.item_as_double(i));
  }
}

TEST(SubgraphClosure, GradientOfAnIfFollowsTheBranchTaken) {
  TrainingSession session(if_graph(), {{"x", "w"}, {}, false});
  Tensor x = random_tensor(DType::Float32, {2, 3}, 1), w = random_tensor(DType::Float32, {2, 3}, 2);
  Tensor dy = random_tensor(DType::Float32, {2, 3}, 3);
  for (bool cond : {true, false}) {
    std::vector<Tensor> out;
    auto call = session.forward({Tensor::scalar<bool>(cond), x, w}, 0, out);
    std::vector<Tensor> grads = session.backward(*call, {dy});
    for (int64_t i = 0; i < x.numel(); ++i) {
      EXPECT_EQ(grads[0].item_as_double(i), dy.item_as_double(i));
      EXPECT_EQ(grads[1].item_as_double(i), cond ? dy.item_as_double(i) : 0.0) << "cond " << cond;
    }
  }
}

TEST(IfInlining, AConstantConditionLeavesTheBranchTakenAndTheSameResult) {
  Graph g = if_graph();
  g.inputs = {"x", "w"};
  g.nodes.insert(g.nodes.begin(), constant("cond", Tensor::scalar<bool>(true)));
  Graph inlined = g;
  close_subgraphs(inlined);
  EXPECT_TRUE(inline_constant_ifs(inlined));
  for (const Node& n : inlined.nodes) EXPECT_NE(n.op_type, "If");
  Tensor x = random_tensor(DType::Float32, {2, 3}, 1), w = random_tensor(DType::Float32, {2, 3}, 2);
  Tensor optimized = InferenceSession(g, false, 1).run({x, w}, 0)[0];
  Tensor plain = InferenceSession(g, false, 0).run({x, w}, 0)[0];
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(optimized.item_as_double(i), plain.item_as_double(i));
}

TEST(SubgraphClosure, GradientOfAnIfWhoseBranchDrawsRandomNumbersIsRefused) {
  Graph g = if_graph();
  Graph& then_branch = *g.nodes[0].attrs.at("then_branch").g;
  then_branch.nodes.push_back(make("Dropout", {"sum"}, {"dropped"}));
  then_branch.outputs = {"dropped"};
  try {
    TrainingSession session(g, {{"x", "w"}, {}, false});
    FAIL() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("then_branch draws random numbers"), std::string::npos) << e.what();
  }
}

// A PyTorch Function in a branch would run again in the recompute (and may draw or count).
TEST(SubgraphClosure, GradientOfAnIfWhoseBranchRunsAPythonFunctionIsRefused) {
  Graph g = if_graph();
  Graph& then_branch = *g.nodes[0].attrs.at("then_branch").g;
  Node fn = make("PythonOp", {"sum"}, {"fn_out", "fn_ctx"}, {{"function_key", Attribute::of_string("k")}});
  fn.domain = kOnnxTrainDomain;
  then_branch.nodes.push_back(fn);
  then_branch.outputs = {"fn_out"};
  then_branch.opsets[kOnnxTrainDomain] = 1;
  try {
    TrainingSession session(g, {{"x", "w"}, {}, false});
    FAIL() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("runs a PyTorch autograd.Function"), std::string::npos) << e.what();
  }
}

// for i in range(4): s = s + x, scanning s: s ends at 4x; the scan output is [x, 2x, 3x, 4x].
TEST(SubgraphClosure, LoopCarriesStateAndStacksScanOutputs) {
  auto body = std::make_shared<Graph>();
  body->inputs = {"i", "cond_in", "s"};
  body->add_node(make("Add", {"s", "x"}, {"s_next"}));
  body->add_node(make("Identity", {"cond_in"}, {"cond_out"}));
  body->add_node(make("Identity", {"s_next"}, {"s_scan"}));
  body->outputs = {"cond_out", "s_next", "s_scan"};
  Graph g;
  g.inputs = {"x"};
  g.add_node(constant("trips", Tensor::scalar<int64_t>(4)));
  g.add_node(constant("s0", Tensor::zeros(DType::Float32, {3})));
  g.add_node(make("Loop", {"trips", "", "s0"}, {"s_final", "scanned"}, {{"body", graph_attr(body)}}));
  g.outputs = {"s_final", "scanned"};
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});
  std::vector<Tensor> out = InferenceSession(g).run({x}, 0);
  EXPECT_EQ(out[0].shape(), TensorShape({3}));
  EXPECT_EQ(out[1].shape(), TensorShape({4, 3}));
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[1].item_as_double(k * 3 + j), (k + 1) * (j + 1));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(out[0].item_as_double(j), 4 * (j + 1));
}

// torch's x.chunk over a dynamic dim: SplitToSequence by a runtime size list, then SequenceAt.
Graph chunk_graph() {
  Graph g;
  g.inputs = {"x"};
  g.value_info["x"].dtype = DType::Float32;
  g.add_node(constant("two", Tensor::from_vector<int64_t>({2}, {1})));
  g.add_node(constant("three", Tensor::from_vector<int64_t>({3}, {1})));
  g.add_node(make("Concat", {"two", "three"}, {"sizes"}, {{"axis", Attribute::of_int(0)}}));
  g.add_node(make("SplitToSequence", {"x", "sizes"}, {"parts"}, {{"axis", Attribute::of_int(1)}}));
  g.add_node(constant("one", Tensor::scalar<int64_t>(1)));
  g.add_node(constant("last", Tensor::scalar<int64_t>(-1)));
  g.add_node(make("SequenceAt", {"parts", "one"}, {"second"}));
  g.add_node(make("SequenceAt", {"parts", "last"}, {"also_second"}));
  g.add_node(make("SequenceLength", {"parts"}, {"count"}));
  g.outputs = {"second", "also_second", "count"};
  return g;
}

TEST(SequenceLowering, ChunkBecomesSlicesAndAgreesWithTheSequenceKernels) {
  Graph lowered = chunk_graph();
  EXPECT_EQ(lower_sequences(lowered), 2);  // SequenceLength of a split stays with the kernels
  bool has_at = false;
  for (const Node& n : lowered.nodes) has_at = has_at || n.op_type == "SequenceAt";
  EXPECT_FALSE(has_at);
  Tensor x = random_tensor(DType::Float32, {2, 5}, 4);
  std::vector<Tensor> out = InferenceSession(chunk_graph()).run({x}, 0);  // lowers inside
  ASSERT_EQ(out[0].shape(), TensorShape({2, 3}));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[0].item_as_double(r * 3 + c), x.item_as_double(r * 5 + 2 + c));
      EXPECT_EQ(out[1].item_as_double(r * 3 + c), x.item_as_double(r * 5 + 2 + c));
    }
  EXPECT_EQ(out[2].item_as_int(), 2);
}

TEST(SequenceLowering, GradientsFlowThroughALoweredChunk) {
  Graph g = chunk_graph();
  g.outputs = {"second"};
  TrainingSession session(g, {{"x"}, {}, false});
  Tensor x = random_tensor(DType::Float32, {2, 5}, 4), dy = random_tensor(DType::Float32, {2, 3}, 5);
  std::vector<Tensor> out;
  auto call = session.forward({x}, 0, out);
  Tensor dx = session.backward(*call, {dy})[0];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(dx.item_as_double(r * 5 + c), c < 2 ? 0.0 : dy.item_as_double(r * 3 + c - 2));
}

std::string error_of(const Graph& g) {
  try {
    InferenceSession(g).run({random_tensor(DType::Float32, {2, 5}, 4)}, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Sequences, OutOfRangePositionsAreRefusedNamingTheValue) {
  // The kernel: a SequenceConstruct's element count is known, so position 7 is not lowered.
  Graph construct;
  construct.inputs = {"x"};
  construct.add_node(make("SequenceConstruct", {"x", "x"}, {"pair"}));
  construct.add_node(constant("seven", Tensor::scalar<int64_t>(7)));
  construct.add_node(make("SequenceAt", {"pair", "seven"}, {"picked"}));
  construct.outputs = {"picked"};
  std::string message = error_of(construct);
  EXPECT_NE(message.find("SequenceAt"), std::string::npos) << message;
  EXPECT_NE(message.find("position 7 is out of range for a sequence of 2"), std::string::npos) << message;
  // Lowered: the Slices that stand for element 7 of a two-element split fail, named after it.
  Graph split = chunk_graph();
  split.nodes[4] = constant("one", Tensor::scalar<int64_t>(7));
  split.outputs = {"second"};
  message = error_of(split);
  EXPECT_NE(message.find("'second_"), std::string::npos) << message;
}

// A Loop whose condition never turns false and whose trip count is 2^62: an error, not a hang.
TEST(SubgraphClosure, ALoopThatWouldNotEndStopsAtTheIterationLimit) {
  auto body = std::make_shared<Graph>();
  body->inputs = {"i", "cond_in", "v"};
  body->add_node(make("Identity", {"cond_in"}, {"cond_out"}));
  body->add_node(make("Identity", {"v"}, {"v_out"}));
  body->outputs = {"cond_out", "v_out"};
  Graph g;
  g.inputs = {"trips", "cond", "v0"};
  g.add_node(make("Loop", {"trips", "cond", "v0"}, {"v_final"}, {{"body", graph_attr(body)}}));
  g.outputs = {"v_final"};
  set_loop_iteration_limit(50);
  try {
    InferenceSession(g).run({Tensor::scalar<int64_t>(int64_t(1) << 62), Tensor::scalar<bool>(true),
                             Tensor::scalar<float>(1)},
                            0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ran 50 iterations without ending"), std::string::npos) << e.what();
  }
  set_loop_iteration_limit(0);
}

}  // namespace
}  // namespace onnxtrain::testing
