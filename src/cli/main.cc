// `onnxtrain`: train an ONNX model from the command line (README, "Command line").
//   onnxtrain artifacts MODEL.onnx --out DIR [--frozen NAME ...] [--loss ...] [--optimizer ...]
//   onnxtrain train DIR --data TRAIN.npz [--epochs N] [--batch-size B] [--lr LR] [--resume] ...
//   onnxtrain eval DIR --data TEST.npz
//   onnxtrain export DIR --out TRAINED.onnx
//   onnxtrain audit DIR --data D.npz [--top N] [--json PATH]
// Any failure is one line on stderr and exit status 1 (2 for a malformed command line).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

using namespace onnxtrain;

int report(const std::string& message, int status) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';  // one line, whatever the message
  }
  std::fprintf(stderr, "onnxtrain: error: %s\n", line.c_str());
  return status;
}

void add_artifacts(CLI::App& app, cli::ArtifactsCommand& command) {
  CLI::App* sub = app.add_subcommand("artifacts", "Build the training, eval and optimizer models and the initial "
                                                  "checkpoint from an inference ONNX model");
  sub->add_option("MODEL", command.model_path, "The ONNX model, with its weights")->required();
  sub->add_option("--out", command.out_dir, "Directory to write the artifacts to (created when missing)")->required();
  ArtifactOptions& o = command.options;
  sub->add_option("--frozen", o.frozen, "Parameters that do not train (every other one does)");
  sub->add_option("--trainable", o.trainable, "Parameters that train (every other one is frozen)");
  sub->add_option("--loss", command.loss_name,
                  "cross_entropy (logits vs class indices), mse, or none (the model's output is the loss)")
      ->check(CLI::IsMember({"cross_entropy", "mse", "none"}))
      ->capture_default_str();
  sub->add_option("--optimizer", command.optimizer_name, "sgd (with momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  sub->add_option("--lr", o.learning_rate, "Learning rate (train --lr overrides it)")->capture_default_str();
  sub->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "SGD: L2 added to the gradient; AdamW: decoupled")
      ->capture_default_str();
  sub->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  sub->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--eps", o.epsilon, "AdamW epsilon")->capture_default_str();
  sub->callback([&command] {
    ArtifactOptions& options = command.options;
    options.loss = command.loss_name == "mse" ? Loss::MSE : command.loss_name == "none" ? Loss::None : Loss::CrossEntropy;
    options.optimizer = command.optimizer_name == "sgd" ? Optimizer::SGD : Optimizer::AdamW;
    cli::run_artifacts(command);
  });
}

void add_train(CLI::App& app, cli::TrainCommand& command) {
  CLI::App* sub = app.add_subcommand("train", "Train on the x and y arrays of an .npz file; checkpoints every epoch");
  sub->add_option("DIR", command.artifacts_dir, "The artifacts directory")->required();
  sub->add_option("--data", command.data_path, "An .npz file with arrays x (inputs) and y (targets)")->required();
  sub->add_option("--epochs", command.epochs, "Epochs to train in this run")->capture_default_str();
  sub->add_option("--batch-size", command.batch_size, "Examples per step (default 32, or the resumed run's)");
  sub->add_option("--lr", command.learning_rate, "Learning rate (default: the artifacts', or the resumed run's)");
  sub->add_option("--threads", command.threads, "Threads (0: every core)")->capture_default_str();
  sub->add_option("--checkpoint", command.checkpoint_path, "Checkpoint to write and resume (default DIR/trained_checkpoint)");
  sub->add_flag("--resume", command.resume, "Continue the run saved in the checkpoint, bit for bit");
  sub->add_flag("--shuffle", command.shuffle, "Shuffle the examples every epoch (default: file order; --resume keeps the resumed run's order)");
  sub->add_option("--seed", command.seed, "Seed of the shuffle")->capture_default_str();
  sub->add_flag("--drop-last", command.drop_last, "Skip the last, smaller batch of each epoch");
  sub->callback([&command] { cli::run_train(command); });
}

void add_eval(CLI::App& app, cli::EvalCommand& command) {
  CLI::App* sub = app.add_subcommand("eval", "Print the loss (and, for classification, the accuracy) on an .npz file");
  sub->add_option("DIR", command.artifacts_dir, "The artifacts directory")->required();
  sub->add_option("--data", command.data_path, "An .npz file with arrays x and y")->required();
  sub->add_option("--checkpoint", command.checkpoint_path, "Checkpoint to evaluate (default: the trained one, else the initial one)");
  sub->add_option("--batch-size", command.batch_size, "Examples per evaluation batch")->capture_default_str();
  sub->add_option("--threads", command.threads, "Threads (0: every core)")->capture_default_str();
  sub->add_flag("--json", command.json, "Print one JSON object instead");
  sub->callback([&command] { cli::run_eval(command); });
}

void add_export(CLI::App& app, cli::ExportCommand& command) {
  CLI::App* sub = app.add_subcommand("export", "Write the inference model with the trained parameters");
  sub->add_option("DIR", command.artifacts_dir, "The artifacts directory")->required();
  sub->add_option("--out", command.out_path, "The ONNX file to write")->required();
  sub->add_option("--checkpoint", command.checkpoint_path, "Checkpoint to export (default: the trained one, else the initial one)");
  sub->callback([&command] { cli::run_export(command); });
}

void add_audit(CLI::App& app, cli::AuditCommand& command) {
  CLI::App* sub = app.add_subcommand("audit", "Check every node of one training step (the first batch) against "
                                              "its float64 twin and print the worst nodes");
  sub->add_option("DIR", command.artifacts_dir, "The artifacts directory")->required();
  sub->add_option("--data", command.data_path, "An .npz file with arrays x and y; the first batch is audited")->required();
  sub->add_option("--checkpoint", command.checkpoint_path, "Checkpoint to audit (default: the trained one, else the initial one)");
  sub->add_option("--batch-size", command.batch_size, "Examples in the audited batch")->capture_default_str();
  sub->add_option("--top", command.top, "Nodes in the table, worst first")->capture_default_str();
  sub->add_option("--json", command.json_path, "Also write every node's result to this JSON file");
  sub->add_option("--threads", command.threads, "Threads (0: every core)")->capture_default_str();
  sub->callback([&command] { cli::run_audit(command); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"onnxtrain: train ONNX models on the CPU, without Python"};
  app.require_subcommand(1);
  cli::ArtifactsCommand artifacts;
  cli::TrainCommand train;
  cli::EvalCommand eval;
  cli::ExportCommand export_command;
  cli::AuditCommand audit;
  add_artifacts(app, artifacts);
  add_train(app, train);
  add_eval(app, eval);
  add_export(app, export_command);
  add_audit(app, audit);
  const std::vector<std::string> subcommands = {"artifacts", "train", "eval", "export", "audit"};
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(subcommands.begin(), subcommands.end(), argv[1]) == subcommands.end()) {
    return report("unknown subcommand '" + std::string(argv[1]) + "'; use artifacts, train, eval, export or audit "
                  "(see onnxtrain --help)", 2);
  }
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report(std::string(e.what()) + " (see onnxtrain --help)", 2);
  } catch (const onnxtrain::Error& e) {
    return report(e.what(), 1);
  } catch (const std::exception& e) {
    return report(e.what(), 1);
  }
  return 0;
}
