#pragma once
// The four subcommands of the `onnxtrain` tool, on the public API alone (onnxtrain/onnxtrain.h).
// Each throws onnxtrain::Error with a one-sentence message; main() prints it and exits non-zero.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnxtrain/onnxtrain.h"

namespace onnxtrain::cli {

// Where `train` writes its checkpoint (and --resume, eval and export read it) when no --checkpoint
// is given: next to the initial checkpoint of `artifacts`, which stays untouched.
std::string trained_checkpoint_path(const std::string& artifacts_dir);

struct ArtifactsCommand {
  std::string model_path, out_dir;
  std::string loss_name = "cross_entropy", optimizer_name = "adamw";  // set into `options` when run
  ArtifactOptions options;
};
void run_artifacts(const ArtifactsCommand& command);

struct TrainCommand {
  std::string artifacts_dir, data_path, checkpoint_path;  // checkpoint: "" = trained_checkpoint_path
  int64_t epochs = 1;
  std::optional<int64_t> batch_size;  // default 32, or the resumed run's
  std::optional<double> learning_rate;  // default: the artifacts' (or the resumed run's)
  int threads = 0;
  bool resume = false, shuffle = false, drop_last = false;
  uint64_t seed = 0;
};
void run_train(const TrainCommand& command);

struct EvalCommand {
  std::string artifacts_dir, data_path, checkpoint_path;  // "" = the trained one, else the initial
  int64_t batch_size = 256;
  int threads = 0;
  bool json = false;
};
void run_eval(const EvalCommand& command);

struct ExportCommand {
  std::string artifacts_dir, out_path, checkpoint_path;
};
void run_export(const ExportCommand& command);

}  // namespace onnxtrain::cli
