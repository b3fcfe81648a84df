#pragma once
// What the public API's files (src/api/*.cc) share: the layout of an artifacts directory, the
// checkpoint, and the conversions between the API's Array and the engine's Tensor.
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "onnxtrain/onnxtrain.h"

namespace onnxtrain::api {

// The files of an artifacts directory. The models are plain ONNX; their inputs and outputs follow
// a positional convention so that nothing but the checkpoint needs a manifest:
//   training_model: inputs  = data inputs (x, then the target y when there is one), then every
//                             parameter and state tensor (api/model_state.h), by name;
//                   outputs = loss, then the gradient of each trainable parameter, in order, then
//                             the next value of each state tensor, in the checkpoint's order.
//   eval_model:     inputs as training_model (inference mode: BatchNorm reads the running
//                   statistics); outputs = loss, then the model's first output.
//   optimizer_model: inputs = learning_rate (float64 scalar), step (int64 scalar: steps taken so
//                             far), the trainable parameters, their gradients, then each optimizer
//                             state (all parameters' first state, then the second, ...);
//                    outputs = the updated parameters, then the updated states, same order.
//   inference_model: the forward model as given, its BatchNormalizations that have state in
//                    inference mode, for export_inference_model.
inline constexpr const char* kTrainingModelFile = "training_model.onnx";
inline constexpr const char* kEvalModelFile = "eval_model.onnx";
inline constexpr const char* kOptimizerModelFile = "optimizer_model.onnx";
inline constexpr const char* kInferenceModelFile = "inference_model.onnx";
inline constexpr const char* kCheckpointFile = "checkpoint";

const char* loss_name(Loss loss);
Loss loss_from_name(const std::string& name);
const char* optimizer_name(Optimizer optimizer);
Optimizer optimizer_from_name(const std::string& name);
// The optimizer's state tensors per trainable parameter: {"momentum"} or {"exp_avg", "exp_avg_sq"}.
std::vector<std::string> optimizer_state_names(Optimizer optimizer);

// Everything a checkpoint file holds. Written as a zip of .npy arrays (numpy.load reads it as an
// .npz: "parameters/<name>", "state/<name>", "optimizer/<state>/<name>") plus "checkpoint.json"
// for the rest.
struct Checkpoint {
  Loss loss = Loss::CrossEntropy;
  Optimizer optimizer = Optimizer::AdamW;
  std::vector<std::string> trainable, frozen;  // parameter order everywhere
  std::map<std::string, Tensor> parameters;
  std::vector<std::string> state_names;  // the training model's state outputs follow this order
  std::map<std::string, Tensor> state;
  // optimizer_states[s][i]: state optimizer_state_names(optimizer)[s] of trainable[i].
  std::vector<std::vector<Tensor>> optimizer_states;
  int64_t step = 0;
  double learning_rate = 1e-3;
  std::map<std::string, std::string> hyperparameters;  // informative: baked into the optimizer model
  std::map<std::string, std::string> metadata;
};

void write_checkpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint read_checkpoint(const std::string& path);

Tensor to_tensor(const Array& array, const std::string& what);
Array to_array(const Tensor& tensor);
std::string shape_string(const std::vector<int64_t>& shape);

// Throws naming `path` when it is not a readable file; `what` says which file it should be.
void require_file(const std::string& path, const std::string& what);
std::string read_file_bytes(const std::string& path);
void write_file_bytes(const std::string& path, const std::string& bytes);

// `model_bytes` (a ModelProto) with the initializers named in `values` replaced by them; the result
// passes onnx::checker or this throws.
std::string replace_initializers(const std::string& model_bytes, const std::map<std::string, Tensor>& values);
// onnx::checker on a serialized model; throws naming `what`.
void check_model_bytes(const std::string& model_bytes, const std::string& what);

}  // namespace onnxtrain::api
