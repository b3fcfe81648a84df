// BatchNorm's running statistics through the public C++ API: they are state, not parameters; each
// train_step updates them as PyTorch does (momentum, unbiased batch variance); evaluate normalizes
// with them; checkpoints restore them bit for bit and export writes them. Checked against a plain
// reference written out here and against torch eager (api_torch_batchnorm_reference.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "onnx/model_io.h"
#include "onnxtrain/onnxtrain.h"
#include "tests/cpp/api_testing.h"

namespace onnxtrain::testing {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kRows = 6, kChannels = 3, kClasses = 2;
constexpr double kMomentum = 0.9, kEpsilon = 1e-5;  // ONNX's convention: running * momentum + batch * (1 - momentum)

std::vector<float> values(size_t n, float first, float stride) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + stride * static_cast<float>((i * 7) % 11) - 0.3f * static_cast<float>(i % 3);
  return v;
}

// x[N, 3] -> BatchNormalization in training mode, as torch exports it -> Gemm -> logits[N, 2]. Since
// opset 14 training_mode=1 says so; before, the five outputs (batch statistics included) do.
std::string batchnorm_model_bytes(int opset = 17) {
  Graph g;
  g.name = "bn";
  g.opsets[kOnnxDomain] = opset;
  g.inputs = {"x"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{-1, "N"}, {kChannels, ""}}};
  g.add_initializer("scale", Tensor::from_vector(std::vector<float>{1.0f, 0.5f, 1.5f}, {kChannels}));
  g.add_initializer("bias", Tensor::from_vector(std::vector<float>{0.1f, -0.2f, 0.0f}, {kChannels}));
  g.add_initializer("bn.running_mean", Tensor::from_vector(std::vector<float>{0.2f, -0.1f, 0.4f}, {kChannels}));
  g.add_initializer("bn.running_var", Tensor::from_vector(std::vector<float>{1.5f, 0.8f, 1.2f}, {kChannels}));
  g.add_initializer("w", Tensor::from_vector(values(kClasses * kChannels, -0.4f, 0.1f), {kClasses, kChannels}));
  g.add_initializer("b", Tensor::from_vector(std::vector<float>{0.05f, -0.05f}, {kClasses}));
  AttributeMap attrs{{"epsilon", Attribute::of_float(static_cast<float>(kEpsilon))},
                     {"momentum", Attribute::of_float(static_cast<float>(kMomentum))}};
  std::vector<std::string> outputs{"normalized", "bn_mean_out", "bn_var_out"};
  if (opset >= 14) attrs["training_mode"] = Attribute::of_int(1);
  else outputs.insert(outputs.end(), {"bn_saved_mean", "bn_saved_var"});
  g.add_node({"bn", "BatchNormalization", "", {"x", "scale", "bias", "bn.running_mean", "bn.running_var"}, outputs, attrs});
  g.add_node({"fc", "Gemm", "", {"normalized", "w", "b"}, {"logits"}, {{"transB", Attribute::of_int(1)}}});
  g.outputs = {"logits"};
  g.value_info["logits"] = {DType::Float32, std::vector<Dim>{{-1, "N"}, {kClasses, ""}}};
  return save_model(g);
}

Array batch_x(int batch) { return Array::from_floats(values(kRows * kChannels, 0.3f * batch - 1.0f, 0.37f), {kRows, kChannels}); }
Array batch_y(int batch) {
  std::vector<int64_t> y(kRows);
  for (int64_t i = 0; i < kRows; ++i) y[static_cast<size_t>(i)] = (i + batch) % kClasses;
  return Array::from_int64s(y, {kRows});
}

// Per channel of x[N, C]: the batch mean and the biased (population) variance.
std::pair<std::vector<double>, std::vector<double>> moments(const std::vector<float>& x) {
  std::vector<double> mean(kChannels, 0), var(kChannels, 0);
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t c = 0; c < kChannels; ++c) mean[c] += x[n * kChannels + c] / double(kRows);
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t c = 0; c < kChannels; ++c) var[c] += std::pow(x[n * kChannels + c] - mean[c], 2) / double(kRows);
  return {mean, var};
}

// The mean cross-entropy of the model in inference mode (normalizing with `mean` and `var`).
double inference_loss(const TrainingSession& s, const Array& xa, const Array& ya, const std::vector<float>& mean,
                      const std::vector<float>& var) {
  const std::vector<float> x = xa.floats(), scale = s.parameter("scale").floats(), bias = s.parameter("bias").floats();
  const std::vector<float> w = s.parameter("w").floats(), b = s.parameter("b").floats();
  const std::vector<int64_t> y = ya.int64s();
  double loss = 0;
  for (int64_t n = 0; n < kRows; ++n) {
    std::vector<double> logits(kClasses, 0);
    for (int64_t k = 0; k < kClasses; ++k) {
      logits[k] = b[k];
      for (int64_t c = 0; c < kChannels; ++c) {
        const double h = scale[c] * (x[n * kChannels + c] - mean[c]) / std::sqrt(var[c] + kEpsilon) + bias[c];
        logits[k] += h * w[k * kChannels + c];
      }
    }
    const double top = std::max(logits[0], logits[1]);
    loss += (std::log(std::exp(logits[0] - top) + std::exp(logits[1] - top)) + top - logits[y[n]]) / double(kRows);
  }
  return loss;
}

TEST(ApiBatchNorm, RunningStatisticsAreStateNotParameters) {
  TempDir tmp("onnxtrain_bn_");
  const Model model = Model::from_bytes(batchnorm_model_bytes());
  EXPECT_EQ(model.parameter_names(), (std::vector<std::string>{"scale", "bias", "w", "b"}));
  EXPECT_EQ(model.state_names(), (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
  const ArtifactSummary summary = generate_artifacts(model, tmp / "art", ArtifactOptions{});
  EXPECT_EQ(summary.trainable, (std::vector<std::string>{"scale", "bias", "w", "b"}));
  EXPECT_TRUE(summary.frozen.empty());
  EXPECT_EQ(summary.state, model.state_names());
  TrainingSession session(tmp / "art");
  EXPECT_EQ(session.trainable_parameters(), summary.trainable);
  EXPECT_EQ(session.state_names(), summary.state);
  EXPECT_EQ(session.state("bn.running_var").floats(), (std::vector<float>{1.5f, 0.8f, 1.2f}));

  ArtifactOptions freeze_state;
  freeze_state.frozen = {"bn.running_mean"};
  const std::string e = expect_error([&] { generate_artifacts(model, tmp / "bad", freeze_state); });
  EXPECT_HAS(e, "'bn.running_mean' is training state");
  EXPECT_HAS(e, "'scale'");
  EXPECT_HAS(expect_error([&] { session.state("scale"); }), "no state tensor 'scale'");
  EXPECT_HAS(expect_error([&] { session.parameter("bn.running_mean"); }), "no parameter 'bn.running_mean'");
}

TEST(ApiBatchNorm, TrainStepUpdatesAsPyTorchAndEvaluateUsesTheStatistics) {
  TempDir tmp("onnxtrain_bn_");
  ArtifactOptions sgd;
  sgd.optimizer = Optimizer::SGD;
  sgd.learning_rate = 0.1;
  generate_artifacts(Model::from_bytes(batchnorm_model_bytes()), tmp / "art", sgd);
  TrainingSession session(tmp / "art");
  std::vector<float> mean = session.state("bn.running_mean").floats(), var = session.state("bn.running_var").floats();
  for (int step = 0; step < 3; ++step) {
    session.train_step(batch_x(step), batch_y(step));
    const auto [batch_mean, batch_var] = moments(batch_x(step).floats());
    for (int64_t c = 0; c < kChannels; ++c) {
      mean[c] = static_cast<float>(mean[c] * kMomentum + batch_mean[c] * (1 - kMomentum));
      const double unbiased = batch_var[c] * kRows / (kRows - 1);  // PyTorch's update; ONNX's would be biased
      var[c] = static_cast<float>(var[c] * kMomentum + unbiased * (1 - kMomentum));
    }
    const std::vector<float> got_mean = session.state("bn.running_mean").floats();
    const std::vector<float> got_var = session.state("bn.running_var").floats();
    for (int64_t c = 0; c < kChannels; ++c) {
      EXPECT_NEAR(got_mean[c], mean[c], 1e-6) << "running_mean[" << c << "] after step " << step;
      EXPECT_NEAR(got_var[c], var[c], 1e-6 * var[c]) << "running_var[" << c << "] after step " << step;
    }
  }
  // Inference mode: the running statistics normalize, and evaluate changes none of them.
  const Array before = session.state("bn.running_mean");
  const EvalResult result = session.evaluate(batch_x(5), batch_y(5));
  EXPECT_NEAR(result.loss, inference_loss(session, batch_x(5), batch_y(5), mean, var), 1e-5);
  EXPECT_TRUE(same_bytes(session.state("bn.running_mean"), before));
}

TEST(ApiBatchNorm, CheckpointAndExportCarryTheState) {
  TempDir tmp("onnxtrain_bn_");
  generate_artifacts(Model::from_bytes(batchnorm_model_bytes()), tmp / "art", ArtifactOptions{});
  TrainingSession session(tmp / "art");
  for (int step = 0; step < 2; ++step) session.train_step(batch_x(step), batch_y(step));
  session.save_checkpoint(tmp / "ckpt");
  TrainingSession resumed(tmp / "art", tmp / "ckpt");
  for (const auto& name : session.state_names()) EXPECT_TRUE(same_bytes(resumed.state(name), session.state(name))) << name;
  EXPECT_EQ(session.train_step(batch_x(2), batch_y(2)), resumed.train_step(batch_x(2), batch_y(2)));
  for (const auto& name : session.state_names()) EXPECT_TRUE(same_bytes(resumed.state(name), session.state(name))) << name;

  // A checkpoint restored into a session that trained on: back to the saved statistics.
  const Array saved = TrainingSession(tmp / "art", tmp / "ckpt").state("bn.running_var");
  session.load_checkpoint(tmp / "ckpt");
  EXPECT_TRUE(same_bytes(session.state("bn.running_var"), saved));

  session.export_inference_model(tmp / "trained.onnx");
  const Graph exported = load_model_file(tmp / "trained.onnx");
  for (const auto& name : session.state_names()) {
    const Array& want = session.state(name);
    const Tensor& got = exported.initializers.at(name);
    ASSERT_EQ(got.nbytes(), want.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(got.raw_data(), want.bytes.data(), want.bytes.size()), 0) << name;
  }
  ASSERT_EQ(exported.nodes[0].op_type, "BatchNormalization");
  EXPECT_EQ(exported.nodes[0].outputs.size(), 1u);  // inference mode: Y only
  EXPECT_EQ(exported.nodes[0].attr_int("training_mode", 0), 0);
}

TEST(ApiBatchNorm, OpsetThirteenTrainingFormIsStateToo) {
  TempDir tmp("onnxtrain_bn_");
  for (int opset : {13, 17}) {
    const Model model = Model::from_bytes(batchnorm_model_bytes(opset));
    EXPECT_EQ(model.state_names(), (std::vector<std::string>{"bn.running_mean", "bn.running_var"})) << opset;
    generate_artifacts(model, tmp / ("art" + std::to_string(opset)), ArtifactOptions{});
    const Graph eval = load_model_file(tmp / ("art" + std::to_string(opset)) + "/eval_model.onnx");
    for (const Node& n : eval.nodes) {
      if (n.op_type == "BatchNormalization") {
        EXPECT_EQ(n.outputs.size(), 1u) << "opset " << opset;
      }
    }
  }
  TrainingSession old_form(tmp / "art13"), new_form(tmp / "art17");
  for (int step = 0; step < 2; ++step)
    EXPECT_EQ(old_form.train_step(batch_x(step), batch_y(step)), new_form.train_step(batch_x(step), batch_y(step)));
  for (const auto& name : new_form.state_names())
    EXPECT_TRUE(same_bytes(old_form.state(name), new_form.state(name))) << name;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::fabs(want[i])) << what << "[" << i << "]";
}

// torch.onnx.export's training-mode CNN trained through the artifacts ends where torch eager ends:
// the parameters, the running statistics, and the eval-mode loss and accuracy.
TEST(ApiBatchNorm, MatchesTorchEager) {
  const fs::path script = fs::path(__FILE__).parent_path() / "api_torch_batchnorm_reference.py";
  if (std::system("/usr/bin/python3 -c 'import torch, onnx' 2>/dev/null") != 0 || !fs::exists(script))
    GTEST_SKIP() << "needs /usr/bin/python3 with torch and onnx, and " << script;
  TempDir tmp("onnxtrain_bn_");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script.string() + " " + (tmp / "")).c_str()), 0);
  constexpr int64_t kSteps = 6, kBatch = 4, kImage = 3 * 8 * 8;
  const std::vector<float> xs = read_raw<float>(tmp / "x.bin", kSteps * kBatch * kImage);
  const std::vector<int64_t> ys = read_raw<int64_t>(tmp / "y.bin", kSteps * kBatch);
  struct Expected {
    std::string kind, name;
    size_t numel;
  };
  std::vector<Expected> expected;
  std::vector<std::string> state;
  std::ifstream manifest(tmp / "manifest.txt");
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream is(line);
    Expected e;
    is >> e.kind >> e.name >> e.numel;
    if (e.kind == "state") state.push_back(e.name);
    expected.push_back(e);
  }
  ASSERT_EQ(expected.size(), 8u);

  ArtifactOptions o;
  o.optimizer = Optimizer::SGD;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  const ArtifactSummary summary = generate_artifacts(Model::load(tmp / "model.onnx"), tmp / "art", o);
  EXPECT_EQ(summary.trainable.size(), 6u);
  EXPECT_EQ(summary.state, state);
  TrainingSession session(tmp / "art");
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto first = xs.begin() + s * kBatch * kImage;
    session.train_step(Array::from_floats({first, first + kBatch * kImage}, {kBatch, 3, 8, 8}),
                       Array::from_int64s({ys.begin() + s * kBatch, ys.begin() + (s + 1) * kBatch}, {kBatch}));
  }
  for (const Expected& e : expected) {
    const Array got = e.kind == "state" ? session.state(e.name) : session.parameter(e.name);
    expect_close(got.floats(), read_raw<float>(tmp / (e.name + ".bin"), e.numel), e.kind + " " + e.name);
  }
  const std::vector<double> eager_eval = read_raw<double>(tmp / "eval.bin", 2);
  const EvalResult result = session.evaluate(Array::from_floats(xs, {kSteps * kBatch, 3, 8, 8}),
                                             Array::from_int64s(ys, {kSteps * kBatch}));
  EXPECT_NEAR(result.loss, eager_eval[0], 1e-5 + 1e-4 * eager_eval[0]);
  EXPECT_DOUBLE_EQ(result.accuracy, eager_eval[1]);
}

}  // namespace
}  // namespace onnxtrain::testing
