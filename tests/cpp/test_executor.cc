// Running training graphs: concurrent forward calls, memory plans, and errors that name things.
#include <gtest/gtest.h>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

std::vector<Tensor> mlp_feeds(int64_t batch, uint64_t seed) {
  return {random_tensor(DType::Float32, {batch, 8}, seed), random_tensor(DType::Float32, {16, 8}, 2),
          random_tensor(DType::Float32, {16}, 3), random_tensor(DType::Float32, {4, 16}, 4),
          random_tensor(DType::Float32, {4}, 5)};
}

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.item_as_double(i), b.item_as_double(i)) << i;
}

std::vector<Tensor> one_step(TrainingSession& s, const std::vector<Tensor>& feeds, const Tensor& dy) {
  std::vector<Tensor> out;
  auto call = s.forward(feeds, 0, out);
  return s.backward(*call, {dy});
}

TEST(Executor, TwoLiveForwardCallsBackwardInEitherOrder) {
  TrainingSession s(mlp_graph(), {{"x", "w1", "b1", "w2", "b2"}, {}, false});
  auto f1 = mlp_feeds(3, 10), f2 = mlp_feeds(3, 11);
  Tensor d1 = random_tensor(DType::Float32, {3, 4}, 12), d2 = random_tensor(DType::Float32, {3, 4}, 13);
  auto ref1 = one_step(s, f1, d1), ref2 = one_step(s, f2, d2);
  for (bool reverse : {false, true}) {
    std::vector<Tensor> o1, o2;
    auto c1 = s.forward(f1, 0, o1);
    auto c2 = s.forward(f2, 0, o2);  // both stashes alive, each in its own arena
    std::vector<Tensor> g1, g2;
    if (reverse) {
      g2 = s.backward(*c2, {d2});
      g1 = s.backward(*c1, {d1});
    } else {
      g1 = s.backward(*c1, {d1});
      g2 = s.backward(*c2, {d2});
    }
    for (size_t i = 0; i < g1.size(); ++i) {
      expect_equal(g1[i], ref1[i]);
      expect_equal(g2[i], ref2[i]);
    }
  }
}

TEST(Executor, SecondStepRunsFromTheMemoryPlan) {
  TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
  auto feeds = mlp_feeds(6, 1);
  Tensor dy = random_tensor(DType::Float32, {6, 4}, 9);
  auto first = one_step(s, feeds, dy);  // records sizes, then builds the plan
  std::vector<Tensor> out;
  auto call = s.forward(feeds, 0, out);
  auto second = s.backward(*call, {dy});
  for (size_t i = 0; i < first.size(); ++i) expect_equal(first[i], second[i]);
  // A new batch size gets its own plan; results stay right.
  auto other = one_step(s, mlp_feeds(2, 1), random_tensor(DType::Float32, {2, 4}, 9));
  EXPECT_EQ(other[0].shape(), (TensorShape{16, 8}));
}

TEST(Executor, BackwardTwiceIsAnError) {
  TrainingSession s(mlp_graph(), {{"w1"}, {}, false});
  std::vector<Tensor> out;
  auto call = s.forward(mlp_feeds(2, 1), 0, out);
  s.backward(*call, {Tensor()});
  EXPECT_THROW(s.backward(*call, {Tensor()}), Error);
}

TEST(Executor, ShapeMismatchNamesTheInput) {
  TrainingSession s(mlp_graph(), {{"w1"}, {}, false});
  auto feeds = mlp_feeds(2, 1);
  feeds[1] = random_tensor(DType::Float32, {16, 7}, 2);
  std::vector<Tensor> out;
  try {
    s.forward(feeds, 0, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 'w1' must have shape [16x8], got float32[16x7]"), std::string::npos)
        << e.what();
  }
}

TEST(Executor, KernelErrorNamesNodeOpAndTensors) {
  Graph g = mlp_graph();
  g.value_info.clear();  // no declared shapes: the kernel itself meets the mismatch
  TrainingSession s(g, {{"w1"}, {}, false});
  auto feeds = mlp_feeds(2, 1);
  feeds[0] = random_tensor(DType::Float32, {2, 5}, 1);
  std::vector<Tensor> out;
  try {
    s.forward(feeds, 0, out);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Gemm node 'fc1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'x' float32[2x5]"), std::string::npos) << msg;
  }
}

TEST(Executor, CheckFiniteNamesTheNodeThatProducedNaN) {
  TrainingSession s(mlp_graph(), {{"w1"}, {}, true});
  auto feeds = mlp_feeds(2, 1);
  feeds[1].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> out;
  try {
    s.forward(feeds, 0, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Gemm node 'fc1' produced a non-finite value"), std::string::npos) << e.what();
  }
}

// A forward call whose backward never comes may outlive its session (Python drops the graphs
// while an output still holds the call): it owns what its arena goes back to.
TEST(Executor, ForwardCallOutlivesItsSession) {
  std::shared_ptr<ForwardCall> planned, recording;
  {
    TrainingSession s(mlp_graph(), {{"w1", "b1", "w2", "b2"}, {}, false});
    std::vector<Tensor> out;
    auto first = s.forward(mlp_feeds(3, 1), 0, out);
    s.backward(*first, {Tensor()});
    planned = s.forward(mlp_feeds(3, 2), 0, out);    // runs from the memory plan's arena
    recording = s.forward(mlp_feeds(4, 3), 0, out);  // a new shape: records on the heap
  }
  EXPECT_GT(planned->stashed_bytes(), 0);
  EXPECT_FALSE(recording->backward_done());
  planned.reset();
  recording.reset();
}

TEST(Executor, UnsupportedOpNamesOpNodeAndOpset) {
  Graph g = mlp_graph();
  g.nodes[1].op_type = "Mish";
  try {
    TrainingSession s(g, {{"w1"}, {}, false});
    FAIL();
  } catch (const UnsupportedError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Mish"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'relu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("opset 17"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace onnxtrain::testing
