#pragma once
// The one way a graph, built in code or loaded, becomes what the optimizer, autodiff and the
// runtime expect. Training and inference sessions and the training artifacts all prepare their
// graphs here, so a graph is prepared the same way whoever runs it.
#include "ir/graph.h"

namespace onnxtrain {

enum class GraphUse { Inference, Training };

// In order:
// 1. what loading normalizes (onnx/model_io.h normalize_graph): functions expanded, control-flow
//    bodies closed over outer values;
// 2. torch.utils.checkpoint's markers turned into the segments backward recomputes
//    (passes/checkpoint_segments.cc; without backward, removing the markers is all there is);
// 3. ONNX's Gradient nodes expanded into ordinary backward nodes (ops/training/gradient_op.h);
// 4. for training, every op checked to have a kernel: a missing kernel is a more basic gap than
//    the missing gradient rule autodiff would report next;
// 5. shapes and types inferred, and torch's sequence patterns lowered (then inferred again).
void prepare_graph(Graph& graph, GraphUse use);

}  // namespace onnxtrain
