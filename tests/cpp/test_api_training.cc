// The public C++ API end to end: artifacts from an MLP inference model, training with SGD-momentum
// and AdamW against a plain reference written out here, checkpoints, resume, export, and the
// errors at the API's boundary.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "api/graph_runner.h"
#include "api/internal.h"
#include "onnx/model_io.h"
#include "onnxtrain/onnxtrain.h"
#include "tests/cpp/api_testing.h"
#include "tests/cpp/file_sync_recorder.h"
#include "tests/cpp/mlp_graph.h"

namespace onnxtrain::testing {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kIn = 8, kHidden = 16, kOut = 4, kBatch = 6;

std::vector<float> pseudo_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
  return v;
}

// mlp_graph with its weights as initializers: an inference model as torch.onnx.export writes it.
std::string mlp_model_bytes() {
  Graph g = mlp_graph();
  g.inputs = {"x"};
  g.add_initializer("w1", Tensor::from_vector(pseudo_random(kHidden * kIn, 1, 0.35f), {kHidden, kIn}));
  g.add_initializer("b1", Tensor::from_vector(pseudo_random(kHidden, 2, 0.1f), {kHidden}));
  g.add_initializer("w2", Tensor::from_vector(pseudo_random(kOut * kHidden, 3, 0.25f), {kOut, kHidden}));
  g.add_initializer("b2", Tensor::from_vector(pseudo_random(kOut, 4, 0.1f), {kOut}));
  for (const char* w : {"w1", "b1", "w2", "b2"}) g.value_info.erase(w);
  g.value_info["y"] = {DType::Float32, std::vector<Dim>{{-1, "N"}, {kOut, ""}}};
  return save_model(g);
}

Array batch_x(int batch) { return Array::from_floats(pseudo_random(kBatch * kIn, 100 + batch, 1.0f), {kBatch, kIn}); }
Array batch_labels(int batch) {
  std::vector<int64_t> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y[static_cast<size_t>(i)] = (i * 7 + batch * 3) % kOut;
  return Array::from_int64s(y, {kBatch});
}
Array batch_target(int batch) { return Array::from_floats(pseudo_random(kBatch * kOut, 200 + batch, 1.0f), {kBatch, kOut}); }

// ---- the reference: the MLP, its loss and gradients, and torch's optimizers, written out plainly.
struct Weights {
  std::map<std::string, std::vector<float>> w;
};

struct Reference {
  Loss loss;
  Optimizer opt;
  ArtifactOptions o;
  Weights p, m, v;
  int64_t step = 0;
  std::vector<std::string> trainable{"w1", "b1", "w2", "b2"};

  std::vector<float> forward(const std::vector<float>& x, std::vector<float>* h = nullptr) const {
    std::vector<float> hid(kBatch * kHidden), out(kBatch * kOut);
    const auto &w1 = p.w.at("w1"), &b1 = p.w.at("b1"), &w2 = p.w.at("w2"), &b2 = p.w.at("b2");
    for (int64_t n = 0; n < kBatch; ++n)
      for (int64_t j = 0; j < kHidden; ++j) {
        double s = 0;
        for (int64_t i = 0; i < kIn; ++i) s += double(x[n * kIn + i]) * w1[j * kIn + i];
        hid[n * kHidden + j] = static_cast<float>(s + b1[j]);
      }
    for (int64_t n = 0; n < kBatch; ++n)
      for (int64_t k = 0; k < kOut; ++k) {
        double s = 0;
        for (int64_t j = 0; j < kHidden; ++j) s += std::max(0.0f, hid[n * kHidden + j]) * double(w2[k * kHidden + j]);
        out[n * kOut + k] = static_cast<float>(s + b2[k]);
      }
    if (h) *h = hid;
    return out;
  }

  // Returns the loss; fills the gradients.
  double loss_and_grads(const Array& xa, const Array& ya, Weights& g) const {
    const std::vector<float> x = xa.floats();
    std::vector<float> h;
    const std::vector<float> z = forward(x, &h);
    std::vector<double> dz(z.size());
    double loss = 0;
    if (this->loss == Loss::CrossEntropy) {
      const std::vector<int64_t> y = ya.int64s();
      for (int64_t n = 0; n < kBatch; ++n) {
        double mx = -1e30, sum = 0;
        for (int64_t k = 0; k < kOut; ++k) mx = std::max(mx, double(z[n * kOut + k]));
        for (int64_t k = 0; k < kOut; ++k) sum += std::exp(z[n * kOut + k] - mx);
        loss -= (z[n * kOut + y[n]] - mx - std::log(sum)) / kBatch;
        for (int64_t k = 0; k < kOut; ++k)
          dz[n * kOut + k] = (std::exp(z[n * kOut + k] - mx) / sum - (k == y[n])) / kBatch;
      }
    } else {
      const std::vector<float> t = ya.floats();
      for (size_t i = 0; i < z.size(); ++i) {
        const double d = double(z[i]) - t[i];
        loss += d * d / z.size();
        dz[i] = 2 * d / z.size();
      }
    }
    g.w["w1"].assign(kHidden * kIn, 0);
    g.w["b1"].assign(kHidden, 0);
    g.w["w2"].assign(kOut * kHidden, 0);
    g.w["b2"].assign(kOut, 0);
    std::vector<double> dh(kBatch * kHidden, 0);
    for (int64_t n = 0; n < kBatch; ++n)
      for (int64_t k = 0; k < kOut; ++k) {
        g.w["b2"][k] += static_cast<float>(dz[n * kOut + k]);
        for (int64_t j = 0; j < kHidden; ++j) {
          g.w["w2"][k * kHidden + j] += static_cast<float>(dz[n * kOut + k] * std::max(0.0f, h[n * kHidden + j]));
          dh[n * kHidden + j] += dz[n * kOut + k] * p.w.at("w2")[k * kHidden + j];
        }
      }
    for (int64_t n = 0; n < kBatch; ++n)
      for (int64_t j = 0; j < kHidden; ++j) {
        const double d = h[n * kHidden + j] > 0 ? dh[n * kHidden + j] : 0.0;
        g.w["b1"][j] += static_cast<float>(d);
        for (int64_t i = 0; i < kIn; ++i) g.w["w1"][j * kIn + i] += static_cast<float>(d * x[n * kIn + i]);
      }
    return loss;
  }

  double step_on(const Array& x, const Array& y) {
    Weights g;
    const double loss = loss_and_grads(x, y, g);
    ++step;
    for (const auto& name : trainable) {
      auto& w = p.w[name];
      const auto& gr = g.w[name];
      auto& mm = m.w[name];
      auto& vv = v.w[name];
      mm.resize(w.size(), 0.0f);
      vv.resize(w.size(), 0.0f);
      for (size_t i = 0; i < w.size(); ++i) {
        if (opt == Optimizer::SGD) {  // torch.optim.SGD, dampening 0
          const float d = gr[i] + float(o.weight_decay) * w[i];
          mm[i] = step == 1 ? d : mm[i] * float(o.momentum) + d;
          w[i] = w[i] - float(o.learning_rate) * mm[i];
        } else {  // torch.optim.AdamW
          w[i] = w[i] * float(1 - o.learning_rate * o.weight_decay);
          mm[i] = mm[i] * float(o.beta1) + float(1 - o.beta1) * gr[i];
          vv[i] = vv[i] * float(o.beta2) + float(1 - o.beta2) * gr[i] * gr[i];
          const float bc2 = float(std::sqrt(1 - std::pow(o.beta2, double(step))));
          const float step_size = float(o.learning_rate / (1 - std::pow(o.beta1, double(step))));
          w[i] = w[i] - step_size * mm[i] / (std::sqrt(vv[i]) / bc2 + float(o.epsilon));
        }
      }
    }
    return loss;
  }
};

Reference reference_for(const Model& model, Loss loss, Optimizer opt, const ArtifactOptions& o, const std::string& dir) {
  Reference r{loss, opt, o};
  TrainingSession initial(dir);
  for (const char* name : {"w1", "b1", "w2", "b2"}) r.p.w[name] = initial.parameter(name).floats();
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << what << "[" << i << "]";
}

void train_and_compare(Loss loss, Optimizer opt, ArtifactOptions o) {
  TempDir tmp;
  o.loss = loss;
  o.optimizer = opt;
  Model model = Model::from_bytes(mlp_model_bytes());
  generate_artifacts(model, tmp / "art", o);
  Reference ref = reference_for(model, loss, opt, o, tmp / "art");
  TrainingSession session(tmp / "art");
  EXPECT_EQ(session.learning_rate(), o.learning_rate);
  for (int b = 0; b < 4; ++b) {
    const Array x = batch_x(b), y = loss == Loss::CrossEntropy ? batch_labels(b) : batch_target(b);
    const float got = session.train_step(x, y);
    const double want = ref.step_on(x, y);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-6) << "loss at step " << b;
    for (const char* name : {"w1", "b1", "w2", "b2"})
      expect_close(session.parameter(name).floats(), ref.p.w[name], std::string(name) + " after step " + std::to_string(b));
  }
  EXPECT_EQ(session.step_count(), 4);
}

TEST(ApiTraining, SgdMomentumMatchesTorchSgd) {
  ArtifactOptions o;
  o.learning_rate = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  train_and_compare(Loss::CrossEntropy, Optimizer::SGD, o);
}

TEST(ApiTraining, AdamWMatchesTorchAdamW) {
  ArtifactOptions o;
  o.learning_rate = 0.01;
  o.weight_decay = 0.05;
  train_and_compare(Loss::CrossEntropy, Optimizer::AdamW, o);
}

TEST(ApiTraining, MseWithAdamW) {
  ArtifactOptions o;
  o.learning_rate = 0.02;
  train_and_compare(Loss::MSE, Optimizer::AdamW, o);
}

TEST(ApiTraining, ModelReportsItsNames) {
  Model model = Model::from_bytes(mlp_model_bytes());
  EXPECT_EQ(model.input_names(), std::vector<std::string>{"x"});
  EXPECT_EQ(model.output_names(), std::vector<std::string>{"y"});
  EXPECT_EQ(model.parameter_names(), (std::vector<std::string>{"w1", "b1", "w2", "b2"}));
}

TEST(ApiTraining, FrozenParametersStayPut) {
  TempDir tmp;
  ArtifactOptions o;
  o.frozen = {"w1", "b1"};
  o.optimizer = Optimizer::SGD;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", o);
  TrainingSession session(tmp / "art");
  EXPECT_EQ(session.trainable_parameters(), (std::vector<std::string>{"w2", "b2"}));
  const Array w1 = session.parameter("w1"), w2 = session.parameter("w2");
  session.train_step(batch_x(0), batch_labels(0));
  EXPECT_TRUE(same_bytes(session.parameter("w1"), w1));
  EXPECT_FALSE(same_bytes(session.parameter("w2"), w2));

  ArtifactOptions only;
  only.trainable = {"b2"};
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art2", only);
  EXPECT_EQ(TrainingSession(tmp / "art2").trainable_parameters(), std::vector<std::string>{"b2"});
}

TEST(ApiTraining, EvaluateReportsLossAndAccuracy) {
  TempDir tmp;
  ArtifactOptions o;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", o);
  TrainingSession session(tmp / "art");
  Reference ref = reference_for(Model::from_bytes(mlp_model_bytes()), Loss::CrossEntropy, Optimizer::AdamW, o, tmp / "art");
  const Array x = batch_x(0), y = batch_labels(0);
  Weights unused;
  const double want_loss = ref.loss_and_grads(x, y, unused);
  const std::vector<float> z = ref.forward(x.floats());
  int64_t correct = 0;
  for (int64_t n = 0; n < kBatch; ++n)
    correct += std::max_element(z.begin() + n * kOut, z.begin() + (n + 1) * kOut) - (z.begin() + n * kOut) == y.int64s()[n];
  const EvalResult r = session.evaluate(x, y);
  EXPECT_NEAR(r.loss, want_loss, 1e-5 * want_loss);
  EXPECT_EQ(r.examples, kBatch);
  EXPECT_DOUBLE_EQ(r.accuracy, double(correct) / kBatch);
  EXPECT_EQ(session.step_count(), 0);  // evaluation changes nothing

  ArtifactOptions mse;
  mse.loss = Loss::MSE;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "mse", mse);
  EXPECT_EQ(TrainingSession(tmp / "mse").evaluate(x, batch_target(0)).accuracy, -1);
}

TEST(ApiTraining, CheckpointRoundTripIsBitExact) {
  TempDir tmp;
  ArtifactOptions o;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", o);
  TrainingSession a(tmp / "art");
  a.set_learning_rate(0.003);
  for (int b = 0; b < 3; ++b) a.train_step(batch_x(b), batch_labels(b));
  a.save_checkpoint(tmp / "ckpt", {{"epoch", "2"}, {"order", "0,1,2"}});
  TrainingSession b(tmp / "art", tmp / "ckpt");
  EXPECT_EQ(b.step_count(), 3);
  EXPECT_EQ(b.learning_rate(), 0.003);
  for (const char* name : {"w1", "b1", "w2", "b2"}) EXPECT_TRUE(same_bytes(a.parameter(name), b.parameter(name))) << name;
  TrainingSession c(tmp / "art");
  EXPECT_EQ(c.step_count(), 0);
  const auto metadata = c.load_checkpoint(tmp / "ckpt");
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"epoch", "2"}, {"order", "0,1,2"}}));
  EXPECT_EQ(c.step_count(), 3);

  // numpy reads the checkpoint as an .npz.
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    const std::string cmd = "/usr/bin/python3 -c \"import numpy as np, sys; z = np.load(sys.argv[1]); "
                            "assert z['parameters/w1'].shape == (16, 8) and z['optimizer/exp_avg/b2'].dtype == np.float32\" " +
                            (tmp / "ckpt");
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
}

TEST(ApiTraining, CheckpointReachesTheDiskBeforeItsName) {
  TempDir tmp;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", ArtifactOptions{});
  TrainingSession session(tmp / "art");
  const std::string path = fs::weakly_canonical(tmp / "ckpt").string();
  FileSyncRecorder recorder;
  session.save_checkpoint(path);
  const std::vector<std::string> expected{"fsync " + path + ".tmp", "rename " + path + ".tmp -> " + path,
                                          "fsync " + fs::path(path).parent_path().string()};
  // libzip writes the archive through a temporary file of its own, renamed to ckpt.tmp first.
  std::vector<std::string> events = recorder.events();
  events.erase(std::remove_if(events.begin(), events.end(),
                              [&](const std::string& e) { return e.rfind("rename ", 0) == 0 && e.find(" -> " + path + ".tmp") != std::string::npos; }),
               events.end());
  EXPECT_EQ(events, expected);
}

TEST(ApiTraining, AModelOfANewerIrVersionIsRefusedSayingHowToExportIt) {
  onnx::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(mlp_model_bytes()));
  mp.set_ir_version(10);  // what torch.onnx.export's dynamo exporter writes
  std::string bytes;
  ASSERT_TRUE(mp.SerializeToString(&bytes));
  const std::string e = expect_error([&] { Model::from_bytes(bytes); });
  EXPECT_HAS(e, "IR version 10");
  EXPECT_HAS(e, "dynamo=False");
}

TEST(ApiTraining, ResumeEqualsUninterruptedTraining) {
  for (Optimizer opt : {Optimizer::SGD, Optimizer::AdamW}) {
    TempDir tmp;
    ArtifactOptions o;
    o.optimizer = opt;
    o.weight_decay = 0.01;
    generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", o);
    TrainingSession straight(tmp / "art");
    for (int b = 0; b < 4; ++b) straight.train_step(batch_x(b), batch_labels(b));
    {
      TrainingSession first(tmp / "art");
      for (int b = 0; b < 2; ++b) first.train_step(batch_x(b), batch_labels(b));
      first.save_checkpoint(tmp / "half");
    }
    TrainingSession resumed(tmp / "art", tmp / "half");
    for (int b = 2; b < 4; ++b) resumed.train_step(batch_x(b), batch_labels(b));
    EXPECT_EQ(resumed.step_count(), 4);
    for (const char* name : {"w1", "b1", "w2", "b2"})
      EXPECT_TRUE(same_bytes(straight.parameter(name), resumed.parameter(name))) << name << " with optimizer " << int(opt);
  }
}

TEST(ApiTraining, ExportedModelRunsWithTrainedWeightsAndPassesChecker) {
  TempDir tmp;
  ArtifactOptions o;
  o.learning_rate = 0.05;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "art", o);
  TrainingSession session(tmp / "art");
  for (int b = 0; b < 3; ++b) session.train_step(batch_x(b), batch_labels(b));
  session.export_inference_model(tmp / "trained.onnx");
  Model exported = Model::load(tmp / "trained.onnx");  // onnx::checker runs here
  EXPECT_EQ(exported.parameter_names(), (std::vector<std::string>{"w1", "b1", "w2", "b2"}));

  api::GraphRunner runner(load_model_file(tmp / "trained.onnx"));
  const Array x = batch_x(7);
  const std::vector<Tensor> out = runner.run({api::to_tensor(x, "x")}, 0);
  Reference ref{Loss::CrossEntropy, Optimizer::AdamW, o};
  for (const char* name : {"w1", "b1", "w2", "b2"}) ref.p.w[name] = session.parameter(name).floats();
  expect_close(api::to_array(out.at(0)).floats(), ref.forward(x.floats()), "exported output");

  if (std::system("/usr/bin/python3 -c 'import onnx' 2>/dev/null") == 0) {
    const std::string cmd = "/usr/bin/python3 -c \"import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), "
                            "full_check=True)\" " + (tmp / "trained.onnx");
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    for (const char* f : {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"}) {
      const std::string check = "/usr/bin/python3 -c \"import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]))\" " +
                                (tmp / ("art/" + std::string(f)));
      EXPECT_EQ(std::system(check.c_str()), 0) << f;
    }
  }
}

// A model that ends in its own loss, taking x and the target y, trains like the MSE artifacts of the
// same network.
TEST(ApiTraining, ModelWithItsOwnLoss) {
  TempDir tmp;
  Graph g = load_model(mlp_model_bytes());
  g.inputs.push_back("t");
  g.value_info["t"] = {DType::Float32, std::vector<Dim>{{-1, "N"}, {kOut, ""}}};
  g.add_node({"diff", "Sub", "", {"y", "t"}, {"d"}, {}});
  g.add_node({"square", "Mul", "", {"d", "d"}, {"sq"}, {}});
  g.add_node({"mean", "ReduceMean", "", {"sq"}, {"own_loss"}, {{"keepdims", Attribute::of_int(0)}}});
  g.outputs = {"own_loss"};
  g.value_info["own_loss"] = {DType::Float32, std::vector<Dim>{}};
  ArtifactOptions none;
  none.loss = Loss::None;
  generate_artifacts(Model::from_bytes(save_model(g)), tmp / "none", none);
  ArtifactOptions mse;
  mse.loss = Loss::MSE;
  generate_artifacts(Model::from_bytes(mlp_model_bytes()), tmp / "mse", mse);
  TrainingSession a(tmp / "none"), b(tmp / "mse");
  for (int s = 0; s < 2; ++s) EXPECT_EQ(a.train_step(batch_x(s), batch_target(s)), b.train_step(batch_x(s), batch_target(s)));
  for (const char* name : {"w1", "b1", "w2", "b2"}) EXPECT_TRUE(same_bytes(a.parameter(name), b.parameter(name))) << name;
  EXPECT_EQ(a.evaluate(batch_x(3), batch_target(3)).accuracy, -1);
}

// torch.onnx.export's model trained through the artifacts ends where torch eager training with
// torch.optim ends (tests/cpp/api_torch_reference.py writes torch's side; same hyperparameters).
TEST(ApiTraining, MatchesTorchEager) {
  const fs::path script = fs::path(__FILE__).parent_path() / "api_torch_reference.py";
  if (std::system("/usr/bin/python3 -c 'import torch, onnx' 2>/dev/null") != 0 || !fs::exists(script))
    GTEST_SKIP() << "needs /usr/bin/python3 with torch and onnx, and " << script;
  TempDir tmp;
  const std::string ref = tmp / "";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script.string() + " " + ref).c_str()), 0);
  constexpr int64_t kSteps = 5, kRows = 16;
  const std::vector<float> xs = read_raw<float>(tmp / "x.bin", kSteps * kRows * kIn);
  const std::vector<int64_t> ys = read_raw<int64_t>(tmp / "y.bin", kSteps * kRows);
  std::vector<std::pair<std::string, size_t>> params;
  std::ifstream manifest(tmp / "manifest.txt");
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream is(line);
    std::string name;
    is >> name;
    size_t numel = 1;
    for (int64_t d; is >> d;) numel *= static_cast<size_t>(d);
    params.emplace_back(name, numel);
  }
  ASSERT_EQ(params.size(), 4u);
  Model model = Model::load(tmp / "model.onnx");
  for (const char* opt : {"sgd", "adamw"}) {
    ArtifactOptions o;
    if (std::string(opt) == "sgd") {
      o.optimizer = Optimizer::SGD;
      o.learning_rate = 0.1;
      o.momentum = 0.9;
      o.weight_decay = 0.01;
    } else {
      o.optimizer = Optimizer::AdamW;
      o.learning_rate = 0.01;
      o.weight_decay = 0.05;
    }
    generate_artifacts(model, tmp / opt, o);
    TrainingSession session(tmp / opt);
    const std::vector<double> losses = read_raw<double>(tmp / ("losses." + std::string(opt) + ".bin"), kSteps);
    for (int64_t s = 0; s < kSteps; ++s) {
      const Array x = Array::from_floats({xs.begin() + s * kRows * kIn, xs.begin() + (s + 1) * kRows * kIn}, {kRows, kIn});
      const Array y = Array::from_int64s({ys.begin() + s * kRows, ys.begin() + (s + 1) * kRows}, {kRows});
      EXPECT_NEAR(session.train_step(x, y), losses[s], 1e-5 * std::fabs(losses[s])) << opt << " step " << s;
    }
    for (const auto& [name, numel] : params)
      expect_close(session.parameter(name).floats(), read_raw<float>(tmp / (std::string(opt) + "." + name + ".bin"), numel),
                   std::string(opt) + " " + name);
  }
}

TEST(ApiTraining, ErrorsNameWhatIsWrong) {
  TempDir tmp;
  EXPECT_HAS(expect_error([&] { Model::load(tmp / "missing.onnx"); }), tmp / "missing.onnx");
  {
    std::ofstream(tmp / "garbage.onnx") << "not a model";
    EXPECT_HAS(expect_error([&] { Model::load(tmp / "garbage.onnx"); }), tmp / "garbage.onnx");
  }
  const Model model = Model::from_bytes(mlp_model_bytes());
  ArtifactOptions unknown;
  unknown.frozen = {"fc3.weight"};
  const std::string e1 = expect_error([&] { generate_artifacts(model, tmp / "a", unknown); });
  EXPECT_HAS(e1, "'fc3.weight'");
  EXPECT_HAS(e1, "'w1'");
  ArtifactOptions unknown_trainable;
  unknown_trainable.trainable = {"w1", "nope"};
  EXPECT_HAS(expect_error([&] { generate_artifacts(model, tmp / "a", unknown_trainable); }), "'nope'");
  ArtifactOptions both;
  both.trainable = {"w1"};
  both.frozen = {"w2"};
  EXPECT_HAS(expect_error([&] { generate_artifacts(model, tmp / "a", both); }), "not both");
  ArtifactOptions all_frozen;
  all_frozen.frozen = {"w1", "b1", "w2", "b2"};
  EXPECT_HAS(expect_error([&] { generate_artifacts(model, tmp / "a", all_frozen); }), "no parameter is left");
  ArtifactOptions bad_beta;
  bad_beta.beta1 = 1.5;
  EXPECT_HAS(expect_error([&] { generate_artifacts(model, tmp / "a", bad_beta); }), "beta1");
  ArtifactOptions none;
  none.loss = Loss::None;  // the MLP's output is [N, 4], not a loss
  EXPECT_HAS(expect_error([&] { generate_artifacts(model, tmp / "a", none); }), "scalar loss");

  EXPECT_HAS(expect_error([&] { TrainingSession s(tmp / "no_such_dir"); }), tmp / "no_such_dir");
  generate_artifacts(model, tmp / "art", ArtifactOptions{});
  EXPECT_HAS(expect_error([&] { TrainingSession s(tmp / "art", tmp / "no_ckpt"); }), tmp / "no_ckpt");
  TrainingSession session(tmp / "art");
  const std::string wrong_x = expect_error([&] {
    session.train_step(Array::from_floats(std::vector<float>(kBatch * 7), {kBatch, 7}), batch_labels(0));
  });
  EXPECT_HAS(wrong_x, "'x'");
  EXPECT_HAS(wrong_x, "[Nx8]");
  EXPECT_HAS(wrong_x, "[6x7]");
  const std::string wrong_dtype = expect_error([&] {
    session.train_step(Array::from_int64s(std::vector<int64_t>(kBatch * kIn), {kBatch, kIn}), batch_labels(0));
  });
  EXPECT_HAS(wrong_dtype, "int64[6x8]");
  const std::string wrong_y = expect_error([&] {
    session.train_step(batch_x(0), Array::from_int64s(std::vector<int64_t>(kBatch), {kBatch, 1}));
  });
  EXPECT_HAS(wrong_y, "int64[6]");
  EXPECT_HAS(wrong_y, "int64[6x1]");
  EXPECT_HAS(expect_error([&] { session.evaluate(batch_x(0), batch_target(0)); }), "float32[6x4]");
  const std::string bad_label = expect_error([&] {
    session.train_step(batch_x(0), Array::from_int64s({0, 1, 2, 9, 0, 1}, {kBatch}));
  });
  EXPECT_HAS(bad_label, "y[3] is class 9");
  EXPECT_HAS(bad_label, "4 classes");
  EXPECT_EQ(session.step_count(), 0);  // nothing ran
  EXPECT_HAS(expect_error([&] { session.parameter("fc1.bias"); }), "'fc1.bias'");
  EXPECT_HAS(expect_error([&] { session.set_learning_rate(-1); }), "learning rate");
  EXPECT_HAS(expect_error([&] { session.load_checkpoint(tmp / "art/training_model.onnx"); }), "not a checkpoint");

  ArtifactOptions sgd;
  sgd.optimizer = Optimizer::SGD;
  generate_artifacts(model, tmp / "sgd", sgd);
  EXPECT_HAS(expect_error([&] { session.load_checkpoint(tmp / "sgd/checkpoint"); }), "other artifacts");
  fs::remove(tmp / "sgd/optimizer_model.onnx");
  EXPECT_HAS(expect_error([&] { TrainingSession s(tmp / "sgd"); }), "optimizer_model.onnx");
}

}  // namespace
}  // namespace onnxtrain::testing
