// Finite-difference cases for src/ops/python: PythonOp's rule hands the output gradients to the
// Function's own backward. Here a C++ bridge stands in for Python (y = x^3 * w, with its true
// derivative as "user" backward), so the check covers the rule's wiring: which gradients reach
// the backward, the context's lifetime, and the forward inputs kept alive for it.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "ops/python/python_op.h"
#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

class CubeBridge final : public PythonOpBridge {
 public:
  std::vector<Tensor> forward(const std::string&, const std::vector<Tensor>& inputs, const std::vector<bool>&,
                              const std::vector<bool>&, int64_t* context) override {
    const Tensor& x = inputs.at(0);
    const Tensor& w = inputs.at(1);
    Tensor y = Tensor::empty(x.dtype(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.item_as_double(i);
      set(y, i, v * v * v * w.item_as_double(i));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    *context = next_++;
    saved_[*context] = {x, w};  // views of engine memory, as a real ctx holds them
    return {y};
  }

  std::vector<Tensor> backward(int64_t context, const std::vector<Tensor>& grads) override {
    std::pair<Tensor, Tensor> xw;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      xw = saved_.at(context);
    }
    const Tensor& x = xw.first;
    const Tensor& w = xw.second;
    const Tensor& g = grads.at(0);
    Tensor gx = Tensor::empty(x.dtype(), x.shape()), gw = Tensor::empty(x.dtype(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.item_as_double(i), gi = g.item_as_double(i);
      set(gx, i, 3 * v * v * w.item_as_double(i) * gi);
      set(gw, i, v * v * v * gi);
    }
    return {gx, gw};
  }

  void release(int64_t context) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    saved_.erase(context);
  }

  size_t live_contexts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return saved_.size();
  }

 private:
  static void set(Tensor& t, int64_t i, double v) {
    if (t.dtype() == DType::Float64) t.data<double>()[i] = v;
    else t.data<float>()[i] = static_cast<float>(v);
  }
  std::mutex mutex_;
  int64_t next_ = 0;
  std::map<int64_t, std::pair<Tensor, Tensor>> saved_;
};

std::shared_ptr<CubeBridge>& cube_bridge() {
  static auto bridge = std::make_shared<CubeBridge>();
  return bridge;
}

std::vector<GradCase> cases() {
  install_python_op_bridge(cube_bridge());
  AttributeMap attrs{{"function_key", Attribute::of_string("cube")}, {"class_name", Attribute::of_string("Cube")}};
  GradCase c{"PythonOp_user_backward", "PythonOp", kOnnxTrainDomain, attrs,
             {random_tensor(DType::Float64, {3, 4}, 1), random_tensor(DType::Float64, {3, 4}, 2)}};
  c.num_outputs = 2;  // y and the context
  c.float32_tolerance = 1e-6;
  return {c};
}

OT_GRAD_CASES(cases());

Graph cube_graph() {
  Graph g;
  g.inputs = {"x", "w"};
  g.value_info["x"] = ValueInfo{DType::Float32, std::vector<Dim>{{2, ""}, {3, ""}}};
  g.value_info["w"] = ValueInfo{DType::Float32, std::vector<Dim>{{2, ""}, {3, ""}}};
  g.opsets[kOnnxTrainDomain] = 1;
  AttributeMap attrs{{"function_key", Attribute::of_string("cube")},
                     {"class_name", Attribute::of_string("mymodule.Cube")}};
  g.add_node(Node{"cube", "PythonOp", kOnnxTrainDomain, {"x", "w"}, {"y", "ctx"}, attrs});
  g.outputs = {"y"};
  return g;
}

// The context lives as long as the value naming it: a forward whose backward never comes frees
// it with its call, and a backward frees it when it has run.
TEST(PythonOp, ContextIsReleasedWithTheCallOrAfterBackward) {
  TrainingSession session(cube_graph(), {{"x", "w"}, {}, false});
  std::vector<Tensor> inputs{random_tensor(DType::Float32, {2, 3}, 1), random_tensor(DType::Float32, {2, 3}, 2)};
  const size_t before = cube_bridge()->live_contexts();
  {
    std::vector<Tensor> outputs;
    auto call = session.forward(inputs, 0, outputs);
    EXPECT_EQ(cube_bridge()->live_contexts(), before + 1);
  }
  EXPECT_EQ(cube_bridge()->live_contexts(), before);
  std::vector<Tensor> outputs;
  auto call = session.forward(inputs, 0, outputs);
  session.backward(*call, {Tensor::zeros(DType::Float32, {2, 3})});
  EXPECT_EQ(cube_bridge()->live_contexts(), before);
}

TEST(PythonOp, WithoutThePythonPackageItIsRefusedNamingTheFunction) {
  install_python_op_bridge(nullptr);
  InferenceSession session(cube_graph());
  std::vector<Tensor> inputs{random_tensor(DType::Float32, {2, 3}, 1), random_tensor(DType::Float32, {2, 3}, 2)};
  try {
    session.run(inputs, 0);
    ADD_FAILURE() << "ran without a bridge";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("mymodule.Cube"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Python package"), std::string::npos) << e.what();
  }
  install_python_op_bridge(cube_bridge());
}

}  // namespace
}  // namespace onnxtrain::testing
