#pragma once
// ONNX shape inference, node by node, behind guards: libonnx 1.12's inference functions read
// input dims without checking ranks and crash on malformed models (Conv with a 3-D X and a 4-D
// W, ConvTranspose with a 2-D operand, LayerNormalization of a scalar). Each node is checked
// against its schema's arity and the guards below before its inference function runs.
#include "ir/graph.h"

namespace onnxtrain {

// Infers dtypes and shapes node by node and merges them into value_info, where nothing is
// declared yet. Throws an Error naming the node and tensor for a node that no valid model has
// (wrong input or output count, ranks an op cannot take); a node ONNX cannot infer (custom
// domains, unknown shapes, an inference function that throws) only leaves its outputs unknown:
// kernels compute real shapes at run time.
void infer_shapes(Graph& graph);

}  // namespace onnxtrain
