#pragma once
// onnxtrain's public C++ API: train an ONNX model on the CPU with no Python in the loop.
//
// The flow, as in the command-line tool (`onnxtrain artifacts|train|eval|export`):
//
//   onnxtrain::Model model = onnxtrain::Model::load("mlp.onnx");     // an inference model + weights
//   onnxtrain::ArtifactOptions options;
//   options.loss = onnxtrain::Loss::CrossEntropy;                     // appended after the output
//   options.optimizer = onnxtrain::Optimizer::AdamW;
//   onnxtrain::generate_artifacts(model, "artifacts/", options);     // training/eval/optimizer models
//                                                                     // and the initial checkpoint
//   onnxtrain::TrainingSession session("artifacts/");                 // loads artifacts/checkpoint
//   session.set_learning_rate(1e-3);
//   float loss = session.train_step(x, y);                            // forward, backward, optimizer
//   onnxtrain::EvalResult result = session.evaluate(x_test, y_test);
//   session.save_checkpoint("artifacts/checkpoint");
//   session.export_inference_model("trained.onnx");                   // the model with new weights
//
// Parameters and state: a parameter is a floating-point initializer that the optimizer updates from
// its gradient (or a frozen one). State is what the training model updates by itself every step:
// the running mean and variance of each training-mode BatchNormalization (a model exported with
// torch.onnx.export(..., training=TrainingMode.TRAINING)), and a num_batches_tracked beside them
// where the model has one. It is updated exactly as PyTorch updates its BatchNorm buffers
// (momentum, the unbiased batch variance), checkpointed with the parameters, and the eval and
// exported models normalize with it (inference mode). State never trains and has no optimizer state.
//
// Every call that fails throws onnxtrain::Error (a std::runtime_error) whose message names what is
// wrong: the file, the parameter, the input and its shape. Only this header is installed; the
// engine's internals are not part of the API.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "onnxtrain/error.h"

namespace onnxtrain {
// The API lives in a versioned inline namespace: callers write onnxtrain::TrainingSession, and its
// symbols (onnxtrain::v1::...) stay apart from the engine's internal classes of the same name.
inline namespace v1 {

struct ArtifactOptions;
struct ArtifactSummary;

enum class ElementType { Float32, Float64, Int32, Int64, Bool, UInt8 };

// Bytes per element of `type`, and its NumPy name ("float32", ...).
ONNXTRAIN_API size_t element_size(ElementType type);
ONNXTRAIN_API const char* element_type_name(ElementType type);

// A dense, row-major host array: what the API takes and returns. Owns its bytes.
struct ONNXTRAIN_API Array {
  ElementType type = ElementType::Float32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // numel * element size, native byte order

  static Array from_floats(std::vector<float> values, std::vector<int64_t> shape);
  static Array from_int64s(std::vector<int64_t> values, std::vector<int64_t> shape);
  int64_t numel() const;
  // The elements as float32 / int64; throws when `type` is not that type.
  std::vector<float> floats() const;
  std::vector<int64_t> int64s() const;
};

// An ONNX model file, parsed and checked.
class ONNXTRAIN_API Model {
 public:
  static Model load(const std::string& path);
  static Model from_bytes(const std::string& bytes);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  std::vector<std::string> input_names() const;   // graph inputs that are not initializers
  std::vector<std::string> output_names() const;
  std::vector<std::string> parameter_names() const;  // floating-point initializers that are not state
  // The initializers that training updates as state (BatchNorm statistics), in node order.
  std::vector<std::string> state_names() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend ArtifactSummary generate_artifacts(const Model&, const std::string&, const ArtifactOptions&);
};

enum class Loss {
  CrossEntropy,  // logits [N, C] against int64 class indices [N], mean over the batch
  MSE,           // output against a target of the same shape, mean over every element
  None,          // the model's first output already is a scalar loss; its inputs are x and,
                 // when it has a second one, the target y
};

enum class Optimizer {
  SGD,    // torch.optim.SGD(lr, momentum, weight_decay), as ai.onnx.preview.training Momentum
  AdamW,  // torch.optim.AdamW(lr, betas, eps, weight_decay)
};

struct ArtifactOptions {
  // Either list the trainable parameters, or the frozen ones (every other parameter trains);
  // naming both, an initializer the model lacks, or a state tensor is an error.
  std::vector<std::string> trainable;
  std::vector<std::string> frozen;
  Loss loss = Loss::CrossEntropy;
  Optimizer optimizer = Optimizer::AdamW;
  // Hyperparameters stored in the optimizer model; the learning rate can be changed per step.
  double learning_rate = 1e-3;
  double momentum = 0.9;        // SGD
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  // AdamW
  double weight_decay = 0.0;    // SGD: L2 added to the gradient; AdamW: decoupled
};

// What generate_artifacts wrote, in the models' order.
struct ArtifactSummary {
  std::vector<std::string> trainable;  // parameters the optimizer updates
  std::vector<std::string> frozen;     // the others: frozen by the options, or out of the loss's reach
  std::vector<std::string> state;      // state tensors the training model updates (BatchNorm statistics)
};

// Writes into `out_dir` (created when missing): training_model.onnx (forward, loss, gradients,
// new state), eval_model.onnx (forward in inference mode, loss, and the model's output),
// optimizer_model.onnx, checkpoint (every parameter and state tensor, the optimizer state zeroed,
// the learning rate) and inference_model.onnx (the model as given, its training-mode
// BatchNormalizations in inference mode, for export). CrossEntropy and MSE need a model with one
// input x. A trainable parameter the loss does not depend on is frozen (torch leaves its .grad
// None and its optimizer skips it). Only float32 parameters can train. The models are ONNX (the
// layout is in src/api/internal.h).
ONNXTRAIN_API ArtifactSummary generate_artifacts(const Model& model, const std::string& out_dir,
                                                 const ArtifactOptions& options);

struct EvalResult {
  double loss = 0;
  int64_t examples = 0;
  // For cross-entropy: the fraction of examples whose arg-max output is the label; -1 otherwise.
  double accuracy = -1;
};

// One node of an audited training step (TrainingSession::audit_step, `onnxtrain audit`): the node
// recomputed alone in float64 on its own inputs, and the engine's output measured against that.
struct NodeAuditResult {
  std::string node, op_type;
  bool compared = false;  // false: the node has no float64 twin, and `reason` says why
  double rel_error = 0;   // scaled per op family: `normalization` (README, "Numerics audit")
  std::string normalization;
  std::string reason;        // why it was not compared, or how it was judged (random ops)
  std::string worst_output;  // the output with the largest error
  std::vector<std::vector<int64_t>> output_shapes;
};

struct SessionOptions {
  int threads = 0;  // 0: every core
};

// Training on the artifacts of generate_artifacts.
class ONNXTRAIN_API TrainingSession {
 public:
  // Loads the three models of `artifacts_dir` and the checkpoint at `checkpoint_path`
  // (default: artifacts_dir/checkpoint).
  explicit TrainingSession(const std::string& artifacts_dir, const std::string& checkpoint_path = "",
                           const SessionOptions& options = {});
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;
  TrainingSession& operator=(TrainingSession&&) noexcept;

  std::vector<std::string> trainable_parameters() const;
  Array parameter(const std::string& name) const;  // throws naming an unknown parameter
  std::vector<std::string> state_names() const;    // as ArtifactSummary::state
  Array state(const std::string& name) const;      // its current value; throws naming an unknown one

  void set_learning_rate(double lr);
  double learning_rate() const;
  // One step on a batch: forward, loss, gradients, optimizer update, new state (the batch's
  // statistics folded into BatchNorm's running ones). Returns the batch loss.
  // `x` and `y` must fit the model's input and the loss's target (the error says how not); for a
  // Loss::None model without a target input, `y` is an empty Array{}.
  float train_step(const Array& x, const Array& y);
  // Loss (and accuracy) of a batch in inference mode (BatchNorm uses the running statistics),
  // without changing anything.
  EvalResult evaluate(const Array& x, const Array& y);
  int64_t step_count() const;  // optimizer steps taken, checkpointed
  // The numerics audit of one training step on a batch (forward, loss, gradients): one result per
  // node of the training model, in execution order. Changes nothing: no optimizer update, the
  // step count stays; random ops draw what train_step would draw at this step.
  std::vector<NodeAuditResult> audit_step(const Array& x, const Array& y);

  // Parameters, state, optimizer state, step count and `metadata` (free-form strings, e.g. the CLI's
  // epoch and data order): everything a bit-exact resume needs.
  void save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  std::map<std::string, std::string> load_checkpoint(const std::string& path);

  // The original inference model with the trained parameters and state (its BatchNormalizations
  // in inference mode); passes onnx.checker.
  void export_inference_model(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace v1
}  // namespace onnxtrain
