// Trains an ONNX classifier with onnxtrain's C++ API, the whole flow with no Python:
// load the model, build training artifacts, train a few epochs, evaluate, checkpoint, export.
//   train_example MODEL.onnx WORK_DIR
// Exits non-zero (with the reason) when a step fails or training does not lower the loss.
#include <onnxtrain/onnxtrain.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// A learnable toy task: 4 features in [-1, 1), the label is the arg-max of a fixed linear map.
struct Data {
  onnxtrain::Array x, y;
};

Data make_data(int64_t n, uint32_t seed) {
  const float mix[3][4] = {{1.0f, -0.5f, 0.2f, 0.0f}, {-0.3f, 1.0f, 0.0f, 0.5f}, {0.2f, 0.1f, -1.0f, 0.8f}};
  std::vector<float> x(static_cast<size_t>(n * 4));
  std::vector<int64_t> y(static_cast<size_t>(n));
  uint32_t state = seed;
  for (auto& value : x) {
    state = state * 1664525u + 1013904223u;  // a plain LCG: the same data on every platform
    value = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    float best_score = -1e30f;
    for (int64_t c = 0; c < 3; ++c) {
      float score = 0;
      for (int64_t f = 0; f < 4; ++f) score += mix[c][f] * x[static_cast<size_t>(i * 4 + f)];
      if (score > best_score) best_score = score, best = c;
    }
    y[static_cast<size_t>(i)] = best;
  }
  return {onnxtrain::Array::from_floats(x, {n, 4}), onnxtrain::Array::from_int64s(y, {n})};
}

onnxtrain::Array rows(const onnxtrain::Array& array, int64_t first, int64_t count) {
  onnxtrain::Array out = array;
  const size_t row_bytes = array.bytes.size() / static_cast<size_t>(array.shape[0]);
  out.shape[0] = count;
  out.bytes.assign(array.bytes.begin() + static_cast<std::ptrdiff_t>(first * row_bytes),
                   array.bytes.begin() + static_cast<std::ptrdiff_t>((first + count) * row_bytes));
  return out;
}

int fail(const std::string& why) {
  std::fprintf(stderr, "train_example: FAILED: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: train_example MODEL.onnx WORK_DIR");
  const std::string model_path = argv[1], dir = argv[2];
  try {
    onnxtrain::Model model = onnxtrain::Model::load(model_path);
    std::printf("model %s: inputs", model_path.c_str());
    for (const auto& name : model.input_names()) std::printf(" %s", name.c_str());
    std::printf(", %zu parameters\n", model.parameter_names().size());

    onnxtrain::ArtifactOptions options;
    options.loss = onnxtrain::Loss::CrossEntropy;
    options.optimizer = onnxtrain::Optimizer::SGD;
    options.learning_rate = 0.1;
    options.momentum = 0.9;
    onnxtrain::generate_artifacts(model, dir, options);

    onnxtrain::TrainingSession session(dir);
    const Data train = make_data(256, 1), test = make_data(128, 2);
    const double loss_before = session.evaluate(test.x, test.y).loss;
    const int64_t batch = 32;
    for (int epoch = 1; epoch <= 5; ++epoch) {
      double sum = 0;
      for (int64_t first = 0; first < 256; first += batch) {
        sum += session.train_step(rows(train.x, first, batch), rows(train.y, first, batch));
      }
      std::printf("epoch %d: mean training loss %.4f\n", epoch, sum / (256 / batch));
    }
    const onnxtrain::EvalResult after = session.evaluate(test.x, test.y);
    std::printf("test loss %.4f -> %.4f, accuracy %.3f, %lld steps\n", loss_before, after.loss, after.accuracy,
                static_cast<long long>(session.step_count()));
    if (!(after.loss < 0.8 * loss_before)) return fail("training did not lower the test loss");
    if (after.accuracy < 0 || after.accuracy > 1) return fail("cross-entropy evaluation gave no accuracy");

    // A checkpoint restores the same parameters into a new session.
    const std::string checkpoint = dir + "/example_checkpoint";
    session.save_checkpoint(checkpoint, {{"note", "written by train_example"}});
    onnxtrain::TrainingSession restored(dir, checkpoint);
    for (const auto& name : session.trainable_parameters()) {
      if (restored.parameter(name).bytes != session.parameter(name).bytes) {
        return fail("parameter " + name + " differs after loading the checkpoint");
      }
    }
    if (restored.step_count() != session.step_count()) return fail("the step count was not checkpointed");

    const std::string exported = dir + "/trained.onnx";
    session.export_inference_model(exported);
    onnxtrain::Model trained = onnxtrain::Model::load(exported);
    if (trained.parameter_names() != model.parameter_names()) return fail("the exported model lost parameters");
    std::printf("exported %s\n", exported.c_str());

    // Errors are onnxtrain::Error with a message that says what is wrong.
    try {
      session.train_step(onnxtrain::Array::from_floats({1, 2, 3}, {1, 3}), rows(train.y, 0, 1));
      return fail("a batch of the wrong shape was accepted");
    } catch (const onnxtrain::Error& e) {
      std::printf("a wrong shape is refused: %s\n", e.what());
    }
  } catch (const onnxtrain::Error& e) {
    return fail(e.what());
  }
  std::printf("train_example: OK\n");
  return 0;
}
