#pragma once
// What other parts of the engine need to know about BatchNormalization and its PyTorch flavor,
// ai.onnxtrain::BatchNormTraining (both defined in batch_norm.cc).
#include "ir/graph.h"

namespace onnxtrain {

// Whether a BatchNormalization node normalizes with batch statistics. Since opset 14 the
// training_mode attribute says so; before, the training form is the one with more than one output.
bool batchnorm_trains(const Node& node, int opset);

// Turns a training-mode BatchNormalization of `graph` into BatchNormTraining, PyTorch's
// training-mode batch norm (running_var updated with the unbiased batch variance). Its outputs:
// Y, the new running mean and variance (created when the node did not request them), and the
// batch statistics that its gradient rule reads instead of recomputing them.
void use_pytorch_batchnorm(Graph& graph, Node& node);

}  // namespace onnxtrain
