#pragma once
// The five subcommands of the `onnxtrain` tool, on the public API alone (onnxtrain/onnxtrain.h).
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
// Throws, saying how to make them, when `dir` is not an artifacts directory.
void require_artifacts(const std::string& dir);
// The checkpoint eval, export and audit read: an explicit one, else the trained one, else "" (the
// initial one).
std::string checkpoint_to_read(const std::string& dir, const std::string& explicit_path);

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

// One training step on the first batch with every node of the training model checked against its
// float64 twin (TrainingSession::audit_step); prints the worst nodes. Changes no file.
struct AuditCommand {
  std::string artifacts_dir, data_path, checkpoint_path;  // "" = the trained one, else the initial
  int64_t batch_size = 32;
  int64_t top = 20;       // rows of the table
  std::string json_path;  // "": no JSON file
  int threads = 0;
};
void run_audit(const AuditCommand& command);

struct ExportCommand {
  std::string artifacts_dir, out_path, checkpoint_path;
};
void run_export(const ExportCommand& command);

}  // namespace onnxtrain::cli
