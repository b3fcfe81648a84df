#pragma once
// Training state: initializers that the training model itself updates every step, as opposed to
// parameters, which the optimizer updates from their gradients. Today that is BatchNorm's running
// statistics: the running mean and variance of each training-mode BatchNormalization (its optional
// outputs 1 and 2) whose inputs 3 and 4 are float initializers, and PyTorch's num_batches_tracked
// buffer beside them when the model has one (torch.onnx.export drops it, other exporters keep it).
//
// The state is updated as PyTorch updates its buffers: the BatchNormalization nodes become
// ai.onnxtrain::BatchNormTraining, whose kernel (ops/nn/batch_norm.cc) is the one home of
// PyTorch's update (momentum on ONNX's side of the convention, the unbiased batch variance); the
// Python front end substitutes the same op for torch's exports (python/onnxtrain/_rewrite.py).
// The eval and exported inference models normalize with the running statistics (inference mode).
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::api {

// One training-mode BatchNormalization whose running statistics are state.
struct BatchNormState {
  std::string running_mean, running_var;  // initializer names, inputs 3 and 4 of the node
  std::string num_batches_tracked;        // an int64 initializer "<prefix>num_batches_tracked", or ""
};

// Every training-mode BatchNormalization of `graph` (its initializers still in place) with state,
// in node order. Throws naming the node when its running statistics cannot be state: read by
// another node, shared with another BatchNormalization, or spatial=0 (opset < 9).
std::vector<BatchNormState> find_batchnorm_state(const Graph& graph);

// The running statistics that inference-mode BatchNormalizations (an eval-mode export that torch did
// not fold into a Conv) normalize with: float initializers with a gradient, but statistics, which
// eager PyTorch never trains. Artifacts freeze them unless they are named trainable.
std::vector<std::string> inference_statistics(const Graph& graph);

// The state tensors' names, in node order: mean, variance, then num_batches_tracked if any.
std::vector<std::string> state_names(const std::vector<BatchNormState>& state);

// In `graph` (where the state may already be inputs rather than initializers), makes each
// BatchNormalization of `state` update its statistics as PyTorch does. Returns, parallel to
// state_names(state), the value holding each state tensor's next value.
std::vector<std::string> update_state_as_pytorch(Graph& graph, const std::vector<BatchNormState>& state);

// Puts each BatchNormalization of `state` in inference mode: it normalizes with the running
// statistics and outputs Y only.
void normalize_with_running_statistics(Graph& graph, const std::vector<BatchNormState>& state);

// The same on a serialized ModelProto, which keeps everything else of the user's file as it is.
std::string normalize_with_running_statistics(const std::string& model_bytes, const std::vector<BatchNormState>& state);

}  // namespace onnxtrain::api
