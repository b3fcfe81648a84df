#include "cli/commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>

#include "cli/data.h"
#include "cli/progress.h"

namespace onnxtrain::cli {
namespace fs = std::filesystem;
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

void require_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(what + " " + path + " does not exist");
  if (fs::is_directory(path, ec)) throw Error(what + " " + path + " is a directory, not a file");
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void check_parameter_names(const std::vector<std::string>& names, const Model& model, const char* option) {
  const std::vector<std::string> known = model.parameter_names(), state = model.state_names();
  for (const std::string& name : names) {
    if (contains(state, name)) {
      throw Error("'" + name + "' given to " + option + " is BatchNorm state, which training updates by itself, not a "
                  "parameter; the model's parameters are: " + join(known));
    }
    if (!contains(known, name)) {
      throw Error("unknown parameter '" + name + "' given to " + option + "; the model's parameters are: " + join(known));
    }
  }
}

// "4 of 6 parameters trainable, 2 state tensors (BatchNorm statistics)"
std::string describe(const ArtifactSummary& summary) {
  std::string text = std::to_string(summary.trainable.size()) + " of " +
                     std::to_string(summary.trainable.size() + summary.frozen.size()) + " parameters trainable";
  if (!summary.state.empty()) text += ", " + std::to_string(summary.state.size()) + " state tensors (BatchNorm statistics)";
  return text;
}

// Metadata the checkpoint carries for a bit-exact --resume: where in the data order the run is.
struct RunState {
  int64_t epochs_done = 0;
  bool shuffle = false;
  uint64_t seed = 0, rng_state = 0;
  int64_t batch_size = 32, examples = 0;
  bool drop_last = false;
  double learning_rate = 0;

  std::map<std::string, std::string> to_metadata() const {
    char lr[32];
    std::snprintf(lr, sizeof lr, "%.17g", learning_rate);  // round-trips exactly
    return {{"epoch", std::to_string(epochs_done)},      {"shuffle", shuffle ? "1" : "0"},
            {"seed", std::to_string(seed)},              {"rng_state", std::to_string(rng_state)},
            {"batch_size", std::to_string(batch_size)},  {"examples", std::to_string(examples)},
            {"drop_last", drop_last ? "1" : "0"},        {"learning_rate", lr}};
  }

  static RunState from_metadata(const std::map<std::string, std::string>& metadata, const std::string& path) {
    RunState state;
    auto field = [&](const char* key) -> const std::string* {
      auto it = metadata.find(key);
      return it == metadata.end() ? nullptr : &it->second;
    };
    if (field("epoch") == nullptr) {
      throw Error("checkpoint " + path + " was not written by `onnxtrain train` (it has no epoch metadata), so --resume "
                  "cannot continue it; train from the artifacts without --resume");
    }
    try {
      state.epochs_done = std::stoll(*field("epoch"));
      state.shuffle = field("shuffle") && *field("shuffle") == "1";
      if (auto* seed = field("seed")) state.seed = std::stoull(*seed);
      state.rng_state = field("rng_state") ? std::stoull(*field("rng_state")) : state.seed;
      if (auto* batch = field("batch_size")) state.batch_size = std::stoll(*batch);
      if (auto* examples = field("examples")) state.examples = std::stoll(*examples);
      state.drop_last = field("drop_last") && *field("drop_last") == "1";
      if (auto* lr = field("learning_rate")) state.learning_rate = std::stod(*lr);
    } catch (const std::logic_error&) {  // std::invalid_argument, std::out_of_range
      throw Error("checkpoint " + path + " has malformed training metadata; train again without --resume");
    }
    return state;
  }
};

}  // namespace

std::string trained_checkpoint_path(const std::string& artifacts_dir) {
  return (fs::path(artifacts_dir) / "trained_checkpoint").string();
}

void require_artifacts(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error("artifacts directory " + dir + " does not exist; create it with `onnxtrain artifacts MODEL.onnx --out " +
                dir + "`");
  }
}

std::string checkpoint_to_read(const std::string& dir, const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    require_file(explicit_path, "checkpoint");
    return explicit_path;
  }
  const std::string trained = trained_checkpoint_path(dir);
  std::error_code ec;
  return fs::exists(trained, ec) ? trained : "";
}

void run_artifacts(const ArtifactsCommand& command) {
  require_file(command.model_path, "model file");
  const ArtifactOptions& options = command.options;
  if (!options.trainable.empty() && !options.frozen.empty()) {
    throw Error("give either --trainable or --frozen, not both: the parameters not named by one are the other");
  }
  Model model = Model::load(command.model_path);
  check_parameter_names(options.trainable, model, "--trainable");
  check_parameter_names(options.frozen, model, "--frozen");
  const ArtifactSummary summary = generate_artifacts(model, command.out_dir, options);
  std::error_code ec;
  fs::remove(trained_checkpoint_path(command.out_dir), ec);  // it belonged to the previous artifacts
  std::cout << "wrote " << command.out_dir << ": training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint ("
            << describe(summary) << ")\n";
}

void run_train(const TrainCommand& command) {
  require_artifacts(command.artifacts_dir);
  if (command.epochs < 1) throw Error("--epochs must be at least 1, not " + std::to_string(command.epochs));
  const Dataset data = load_dataset(command.data_path);
  const std::string checkpoint =
      command.checkpoint_path.empty() ? trained_checkpoint_path(command.artifacts_dir) : command.checkpoint_path;

  SessionOptions session_options;
  session_options.threads = command.threads;
  TrainingSession session(command.artifacts_dir, "", session_options);

  RunState state;
  if (command.resume) {
    std::error_code ec;
    if (!fs::exists(checkpoint, ec)) {
      throw Error("there is no checkpoint to resume at " + checkpoint + "; run `onnxtrain train` without --resume first");
    }
    state = RunState::from_metadata(session.load_checkpoint(checkpoint), checkpoint);
    session.set_learning_rate(state.learning_rate);
    if (state.examples != data.size()) {
      std::fprintf(stderr, "onnxtrain: warning: %s has %lld examples but the resumed run had %lld; the result will "
                   "differ from an uninterrupted run\n", command.data_path.c_str(),
                   static_cast<long long>(data.size()), static_cast<long long>(state.examples));
    }
  } else {
    state.shuffle = command.shuffle;
    state.seed = state.rng_state = command.seed;
    state.drop_last = command.drop_last;
  }
  if (command.batch_size) state.batch_size = *command.batch_size;
  if (command.learning_rate) session.set_learning_rate(*command.learning_rate);
  state.learning_rate = session.learning_rate();
  state.examples = data.size();
  if (state.batch_size < 1) throw Error("--batch-size must be at least 1, not " + std::to_string(state.batch_size));

  const int64_t n = data.size(), batch = state.batch_size;
  const int64_t steps = state.drop_last ? n / batch : (n + batch - 1) / batch;
  if (steps == 0) {
    throw Error("--drop-last with --batch-size " + std::to_string(batch) + " leaves no batch of the " + std::to_string(n) +
                " examples");
  }
  OrderRng rng(state.rng_state);
  const int64_t last_epoch = state.epochs_done + command.epochs;
  for (int64_t epoch = state.epochs_done + 1; epoch <= last_epoch; ++epoch) {
    std::vector<int64_t> order;
    if (state.shuffle) {
      order = rng.permutation(n);
    } else {
      order.resize(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), int64_t{0});
    }
    ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(last_epoch), steps);
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t examples = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const auto first = order.begin() + step * batch;
      const std::vector<int64_t> rows(first, first + std::min(batch, n - step * batch));
      const float loss = session.train_step(gather_rows(data.x, rows), gather_rows(data.y, rows));
      if (!std::isfinite(loss)) {
        throw Error("the loss became " + std::to_string(loss) + " at epoch " + std::to_string(epoch) + ", step " +
                    std::to_string(step + 1) + "; training diverged (try a lower --lr); the checkpoint keeps the last "
                    "finished epoch");
      }
      loss_sum += loss;
      examples += static_cast<int64_t>(rows.size());
      bar.update(step + 1, examples, loss_sum / static_cast<double>(step + 1));
    }
    bar.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.epochs_done = epoch;
    state.rng_state = rng.state();
    // save_checkpoint replaces the file durably: a run stopped mid-write keeps the previous epoch's.
    session.save_checkpoint(checkpoint, state.to_metadata());
    std::printf("epoch %lld/%lld: mean loss %.6f over %lld steps, %.0f examples/s\n", static_cast<long long>(epoch),
                static_cast<long long>(last_epoch), loss_sum / static_cast<double>(steps),
                static_cast<long long>(steps), seconds > 0 ? static_cast<double>(examples) / seconds : 0.0);
    std::fflush(stdout);
  }
  std::printf("checkpoint %s (after epoch %lld; continue with --resume)\n", checkpoint.c_str(),
              static_cast<long long>(last_epoch));
}

void run_eval(const EvalCommand& command) {
  require_artifacts(command.artifacts_dir);
  if (command.batch_size < 1) throw Error("--batch-size must be at least 1, not " + std::to_string(command.batch_size));
  const Dataset data = load_dataset(command.data_path);
  SessionOptions session_options;
  session_options.threads = command.threads;
  TrainingSession session(command.artifacts_dir, checkpoint_to_read(command.artifacts_dir, command.checkpoint_path),
                          session_options);
  const int64_t n = data.size();
  double loss_sum = 0, correct = 0;
  bool classification = true;
  for (int64_t first = 0; first < n; first += command.batch_size) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min(command.batch_size, n - first)));
    std::iota(rows.begin(), rows.end(), first);
    const EvalResult result = session.evaluate(gather_rows(data.x, rows), gather_rows(data.y, rows));
    const auto count = static_cast<double>(rows.size());
    loss_sum += result.loss * count;  // each batch's loss is a mean over its examples
    if (result.accuracy < 0) classification = false;
    correct += result.accuracy * count;
  }
  const double loss = loss_sum / static_cast<double>(n);
  const double accuracy = correct / static_cast<double>(n);
  if (command.json) {
    nlohmann::json out = {{"loss", loss}, {"examples", n}, {"accuracy", nullptr}};
    if (classification) out["accuracy"] = accuracy;
    std::cout << out.dump() << "\n";
    return;
  }
  std::printf("examples %lld\nloss %.6f\n", static_cast<long long>(n), loss);
  if (classification) std::printf("accuracy %.6f (%lld/%lld)\n", accuracy, std::llround(correct), static_cast<long long>(n));
}

void run_export(const ExportCommand& command) {
  require_artifacts(command.artifacts_dir);
  const std::string checkpoint = checkpoint_to_read(command.artifacts_dir, command.checkpoint_path);
  TrainingSession session(command.artifacts_dir, checkpoint);
  session.export_inference_model(command.out_path);
  std::cout << "wrote " << command.out_path << " (parameters and state of "
            << (checkpoint.empty() ? (fs::path(command.artifacts_dir) / "checkpoint").string() : checkpoint) << ")\n";
}

}  // namespace onnxtrain::cli
