// Backward recomputing activations instead of stashing them (passes/recompute.cc), for
// torch.utils.checkpoint segments (passes/checkpoint_segments.cc) and for the cheap activations of
// memory_optimization="recompute": structure (what the stash holds, where the copies run) and
// numbers (outputs and gradients equal to the graph that stashes), at both optimizer levels.
#include <algorithm>
#include <set>

#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

const AttributeMap kTransB{{"transB", Attribute::of_int(1)}};

Node marker(const char* op, int64_t segment, std::vector<std::string> in, std::vector<std::string> out) {
  return Node{std::string(op) + std::to_string(segment), op, kOnnxTrainDomain, std::move(in), std::move(out),
              {{"segment", Attribute::of_int(segment)}}};
}

// x[N,6] -> Gemm(w1) -> h -> `activation` -> a -> Gemm(w2) -> y; with `checkpointed`, the part
// from x to a is one checkpointed segment.
Graph two_layers(const std::string& activation, bool checkpointed) {
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 6});
  add_input(g, "w1", DType::Float32, {10, 6});
  add_input(g, "w2", DType::Float32, {3, 10});
  g.opsets[kOnnxTrainDomain] = 1;
  const std::string in = checkpointed ? "x_in" : "x", out = checkpointed ? "a" : "a_out";
  if (checkpointed) g.add_node(marker("CheckpointBegin", 0, {"x"}, {"x_in"}));
  g.add_node({"fc1", "Gemm", "", {in, "w1"}, {"h"}, kTransB});
  if (activation == "Gelu" || activation == "Silu") {
    g.add_node({"act", activation, kOnnxTrainDomain, {"h"}, {out}, {}});
  } else if (activation == "LayerNormalization") {
    add_input(g, "scale", DType::Float32, {10});
    g.add_node({"act", "LayerNormalization", "", {"h", "scale"}, {out}, {}});
  } else {
    g.add_node({"act", activation, "", {"h"}, {out}, {}});
  }
  if (checkpointed) g.add_node(marker("CheckpointEnd", 0, {"a"}, {"a_out"}));
  g.add_node({"fc2", "Gemm", "", {"a_out", "w2"}, {"y"}, kTransB});
  g.outputs = {"y"};
  return g;
}

std::vector<std::string> weights_of(const Graph& g) {
  std::vector<std::string> wrt;
  for (const auto& in : g.inputs)
    if (in != "x" && in != "z") wrt.push_back(in);
  return wrt;
}

TrainingSessionOptions options(const Graph& g, int level, const char* memory_optimization = "none") {
  TrainingSessionOptions o{weights_of(g), {}, false, level};
  o.memory_optimization = memory_optimization;
  return o;
}

std::set<std::string> stashed_activations(const TrainingSession& s) {
  std::set<std::string> out;
  for (const auto& v : s.training_graph().stashed)
    if (v.kind == StashedValue::Kind::Activation) out.insert(v.value);
  return out;
}

std::vector<const Node*> backward_nodes(const TrainingSession& s, const std::string& op_type) {
  std::vector<const Node*> out;
  const TrainingGraph& tg = s.training_graph();
  for (size_t k = tg.yield_index; k < tg.graph.nodes.size(); ++k)
    if (tg.graph.nodes[k].op_type == op_type) out.push_back(&tg.graph.nodes[k]);
  return out;
}

std::vector<Tensor> feeds_for(const Graph& g, int64_t batch) {
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    std::vector<int64_t> dims;
    for (const Dim& d : *g.info(g.inputs[i])->shape) dims.push_back(d.is_static() ? d.value : batch);
    feeds.push_back(random_tensor(DType::Float32, TensorShape(dims), 11 + i));
  }
  return feeds;
}

// Outputs, then gradients of one training step with fixed output weights.
std::vector<Tensor> train_step(const Graph& g, const TrainingSessionOptions& o, const std::vector<Tensor>& feeds,
                               int64_t* stashed = nullptr, int64_t* recomputed = nullptr) {
  TrainingSession session(g, o);
  std::vector<Tensor> outputs;
  auto call = session.forward(feeds, 5, outputs);
  if (stashed) *stashed = call->stashed_bytes();
  if (recomputed) *recomputed = call->recomputed_bytes();
  std::vector<Tensor> weights;
  for (int pos : session.training_graph().differentiable_output_positions)
    weights.push_back(random_tensor(DType::Float32, outputs[static_cast<size_t>(pos)].shape(), 90 + pos));
  std::vector<Tensor> grads = session.backward(*call, weights);
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  return outputs;
}

void expect_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << "result " << i;
    if (a[i].defined()) {
      EXPECT_EQ(max_difference(a[i], b[i]), 0) << "result " << i;
    }
  }
}

TEST(CheckpointSegments, MarkersGoAndTheSegmentsNodesAreFlagged) {
  Graph g = two_layers("Tanh", true);
  EXPECT_TRUE(mark_checkpoint_segments(g));
  EXPECT_EQ(count_ops(g, "CheckpointBegin") + count_ops(g, "CheckpointEnd"), 0);
  for (const auto& n : g.nodes) EXPECT_EQ(n.recompute, n.name != "fc2") << n.name;
  EXPECT_EQ(g.nodes[0].inputs[0], "x");
  EXPECT_EQ(g.nodes.back().inputs[0], "a");
  EXPECT_FALSE(mark_checkpoint_segments(g));
}

TEST(CheckpointSegments, ValuesCapturedFromOutsideAreTheSegmentsInputs) {
  // The segment reads `outside`, computed before it from x: that node is not recomputed.
  Graph g;
  add_input(g, "x", DType::Float32, {4});
  g.add_node({"before", "Exp", "", {"x"}, {"outside"}, {}});
  g.add_node(marker("CheckpointBegin", 3, {"x"}, {"x_in"}));
  g.add_node({"inside", "Mul", "", {"x_in", "outside"}, {"m"}, {}});
  g.add_node(marker("CheckpointEnd", 3, {"m"}, {"m_out"}));
  g.add_node({"after", "Sin", "", {"m_out"}, {"y"}, {}});
  g.outputs = {"y"};
  mark_checkpoint_segments(g);
  for (const auto& n : g.nodes) EXPECT_EQ(n.recompute, n.name == "inside") << n.name;
}

TEST(CheckpointSegments, AMarkerOutputThatIsAGraphOutputKeepsItsName) {
  Graph g;
  add_input(g, "x", DType::Float32, {4});
  g.add_node(marker("CheckpointBegin", 0, {"x"}, {"x_in"}));
  g.add_node({"inside", "Sin", "", {"x_in"}, {"s"}, {}});
  g.add_node(marker("CheckpointEnd", 0, {"s"}, {"y"}));
  g.outputs = {"y"};
  mark_checkpoint_segments(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].op_type, "Identity");
  EXPECT_EQ(g.nodes[1].outputs[0], "y");
  expect_same_numbers(g, {random_tensor(DType::Float32, {4}, 1)});
}

TEST(Recompute, ACheckpointedSegmentStashesItsInputsOnly) {
  for (int level : {0, 1}) {
    SCOPED_TRACE(level);
    const Graph plain = two_layers("Tanh", false), checkpointed = two_layers("Tanh", true);
    TrainingSession stashing(plain, options(plain, level)), recomputing(checkpointed, options(checkpointed, level));
    EXPECT_FALSE(stashed_activations(stashing).empty());
    EXPECT_TRUE(stashed_activations(recomputing).empty());  // x is an input; h and a are recomputed
    std::vector<std::string> recomputed;
    for (const auto& v : recomputing.training_graph().recomputed) recomputed.push_back(v.value);
    EXPECT_EQ(recomputed, std::vector<std::string>{"a"});
    if (level == 0) {
      // The copies run in backward, each just before what reads it: fc2's weight gradient reads a.
      ASSERT_EQ(backward_nodes(recomputing, "Tanh").size(), 1u);
      EXPECT_EQ(backward_nodes(recomputing, "Gemm").size(), 1u + backward_nodes(stashing, "Gemm").size());
    }
  }
}

TEST(Recompute, CheckpointedSegmentsComputeTheSameNumbers) {
  for (const char* activation : {"Tanh", "Gelu", "Silu", "LayerNormalization", "Sigmoid"}) {
    for (int level : {0, 1}) {
      SCOPED_TRACE(std::string(activation) + " level " + std::to_string(level));
      const Graph plain = two_layers(activation, false), checkpointed = two_layers(activation, true);
      const auto feeds = feeds_for(plain, 5);
      int64_t plain_bytes = 0, checkpointed_bytes = 0, recomputed = 0;
      const auto expected = train_step(plain, options(plain, level), feeds, &plain_bytes);
      const auto actual = train_step(checkpointed, options(checkpointed, level), feeds, &checkpointed_bytes, &recomputed);
      expect_identical(expected, actual);
      EXPECT_LT(checkpointed_bytes, plain_bytes);
      // a, [5, 10] floats; and h, which the gradients of Gelu, Silu and LayerNormalization read.
      const std::string act = activation;
      const bool reads_input = act == "Gelu" || act == "Silu" || act == "LayerNormalization";
      EXPECT_EQ(recomputed, (reads_input ? 2 : 1) * 5 * 10 * 4);
    }
  }
}

TEST(Recompute, CheapActivationsWhoseInputsAreKeptAreRecomputed) {
  // Gelu's gradient reads h, so fc2's reading a costs a Gelu in backward instead of a in the stash.
  for (const char* activation : {"Gelu", "Silu", "LayerNormalization"}) {
    for (int level : {0, 1}) {
      SCOPED_TRACE(std::string(activation) + " level " + std::to_string(level));
      const Graph g = two_layers(activation, false);
      TrainingSession stashing(g, options(g, level)), recomputing(g, options(g, level, "recompute"));
      EXPECT_TRUE(stashed_activations(stashing).count("a_out"));
      EXPECT_FALSE(stashed_activations(recomputing).count("a_out"));
      EXPECT_TRUE(stashed_activations(recomputing).count("h"));
      const auto feeds = feeds_for(g, 7);
      int64_t none_bytes = 0, recompute_bytes = 0, recomputed = 0;
      const auto expected = train_step(g, options(g, level), feeds, &none_bytes);
      const auto actual = train_step(g, options(g, level, "recompute"), feeds, &recompute_bytes, &recomputed);
      expect_identical(expected, actual);
      EXPECT_GE(none_bytes - recompute_bytes, 7 * 10 * 4);
      EXPECT_GE(recomputed, 7 * 10 * 4);
    }
  }
}

TEST(Recompute, CheapRecomputeNeverAddsToTheStash) {
  // The gradient of Add(h, k), whose operands' batch dims are not known to be equal, reads
  // their shapes only: queries that move into the forward, so h and k are not kept, and the Add
  // stays stashed rather than be recomputed from them. Gelu's output is still recomputed.
  Graph g;
  add_input(g, "x", DType::Float32, {-1, 6});
  add_input(g, "z", DType::Float32, {-1, 6});
  add_input(g, "w1", DType::Float32, {10, 6});
  add_input(g, "w3", DType::Float32, {10, 6});
  add_input(g, "w2", DType::Float32, {3, 10});
  g.opsets[kOnnxTrainDomain] = 1;
  g.add_node({"fc1", "Gemm", "", {"x", "w1"}, {"h"}, kTransB});
  g.add_node({"fc3", "Gemm", "", {"z", "w3"}, {"k"}, kTransB});
  g.add_node({"add", "Add", "", {"h", "k"}, {"s"}, {}});
  g.add_node({"act", "Gelu", kOnnxTrainDomain, {"s"}, {"a"}, {}});
  g.add_node({"fc2", "Gemm", "", {"a", "w2"}, {"y"}, kTransB});
  g.outputs = {"y"};
  for (int level : {0, 1}) {
    SCOPED_TRACE(level);
    TrainingSession stashing(g, options(g, level)), recomputing(g, options(g, level, "recompute"));
    const auto before = stashed_activations(stashing), after = stashed_activations(recomputing);
    for (const auto& v : after) EXPECT_TRUE(before.count(v)) << v << " joined the stash";
    EXPECT_LT(after.size(), before.size());
    const auto feeds = feeds_for(g, 4);
    expect_identical(train_step(g, options(g, level), feeds), train_step(g, options(g, level, "recompute"), feeds));
  }
}

TEST(Recompute, ACheapActivationWhoseInputIsNotKeptStaysStashed) {
  // Tanh's gradient reads its output, not h: recomputing a would put h in the stash instead.
  const Graph g = two_layers("Tanh", false);
  for (int level : {0, 1}) {
    TrainingSession recomputing(g, options(g, level, "recompute"));
    EXPECT_EQ(stashed_activations(recomputing), std::set<std::string>{"a_out"});
    EXPECT_TRUE(recomputing.training_graph().recomputed.empty());
  }
}

TEST(Recompute, MatMulsAreNeverCheap) {
  Graph g;
  add_input(g, "x", DType::Float32, {4, 4});
  add_input(g, "w", DType::Float32, {4, 4});
  g.add_node({"mm1", "MatMul", "", {"x", "w"}, {"m"}, {}});
  g.add_node({"mm2", "MatMul", "", {"m", "w"}, {"y"}, {}});
  g.outputs = {"y"};
  TrainingSession s(g, {{"w"}, {}, false, 0, "recompute"});
  EXPECT_EQ(stashed_activations(s), std::set<std::string>{"m"});
}

// input -> Dropout (training) -> d -> Mul(d, w) -> Sigmoid -> Gemm: in a segment, or not.
Graph dropout_graph(bool checkpointed) {
  Graph g;
  add_input(g, "input", DType::Float32, {-1, 8});
  add_input(g, "w", DType::Float32, {8});
  add_input(g, "w2", DType::Float32, {3, 8});
  g.add_initializer("ratio", Tensor::scalar(0.4f));
  Tensor training = Tensor::empty(DType::Bool, TensorShape{});
  training.data<bool>()[0] = true;
  g.add_initializer("training", training);
  const std::string in = checkpointed ? "x_in" : "input", out = checkpointed ? "s" : "s_out";
  g.opsets[kOnnxTrainDomain] = 1;
  if (checkpointed) g.add_node(marker("CheckpointBegin", 0, {"input"}, {"x_in"}));
  g.add_node({"drop", "Dropout", "", {in, "ratio", "training"}, {"d", "mask"}, {}});
  g.add_node({"scale", "Mul", "", {"d", "w"}, {"m"}, {}});
  g.add_node({"act", "Sigmoid", "", {"m"}, {out}, {}});
  if (checkpointed) g.add_node(marker("CheckpointEnd", 0, {"s"}, {"s_out"}));
  g.add_node({"fc", "Gemm", "", {"s_out", "w2"}, {"y"}, kTransB});
  g.outputs = {"y"};
  return g;
}

TEST(Recompute, ADropoutIsRecomputedFromItsMaskNeverRedrawn) {
  const Graph plain = dropout_graph(false), checkpointed = dropout_graph(true);
  TrainingSession s(checkpointed, options(checkpointed, 0));
  EXPECT_EQ(backward_nodes(s, "Dropout").size(), 0u);
  // One DropoutGrad for the gradient, one that recomputes d from x and the forward's mask.
  ASSERT_EQ(backward_nodes(s, "DropoutGrad").size(), 2u);
  EXPECT_EQ(stashed_activations(s), std::set<std::string>{"mask"});
  const auto feeds = feeds_for(plain, 64);
  expect_identical(train_step(plain, options(plain, 0), feeds), train_step(checkpointed, options(checkpointed, 0), feeds));
  expect_identical(train_step(plain, options(plain, 0), feeds), train_step(plain, options(plain, 0, "recompute"), feeds));
}

Graph noise_graph(bool checkpointed) {
  Graph g;
  add_input(g, "x", DType::Float32, {16});
  g.opsets[kOnnxTrainDomain] = 1;
  const std::string in = checkpointed ? "x_in" : "x", out = checkpointed ? "s" : "s_out";
  if (checkpointed) g.add_node(marker("CheckpointBegin", 0, {"x"}, {"x_in"}));
  g.add_node({"noise", "RandomNormalLike", "", {in}, {"n"}, {}});
  g.add_node({"add", "Add", "", {in, "n"}, {"a"}, {}});
  g.add_node({"act", "Sigmoid", "", {"a"}, {out}, {}});
  if (checkpointed) g.add_node(marker("CheckpointEnd", 0, {"s"}, {"s_out"}));
  g.add_node({"sq", "Mul", "", {"s_out", "s_out"}, {"y"}, {}});
  g.outputs = {"y"};
  return g;
}

TEST(Recompute, OtherRandomDrawsStayStashed) {
  const Graph plain = noise_graph(false), checkpointed = noise_graph(true);
  for (int level : {0, 1}) {
    TrainingSession s(checkpointed, {{"x"}, {}, false, level});
    EXPECT_EQ(backward_nodes(s, "RandomNormalLike").size(), 0u);
    EXPECT_EQ(stashed_activations(s), std::set<std::string>{"n"});  // the draw, not what follows it
  }
  const std::vector<Tensor> feeds{random_tensor(DType::Float32, {16}, 3)};
  expect_identical(train_step(plain, {{"x"}, {}, false, 0}, feeds), train_step(checkpointed, {{"x"}, {}, false, 0}, feeds));
}

TEST(Recompute, TheOptionIsChecked) {
  EXPECT_FALSE(recompute_cheap_activations("none"));
  EXPECT_TRUE(recompute_cheap_activations("recompute"));
  EXPECT_THROW(recompute_cheap_activations("everything"), Error);
}

}  // namespace
}  // namespace onnxtrain::testing
