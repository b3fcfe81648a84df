#pragma once
// ONNX's Gradient op (ai.onnx.preview.training, opset 1) has no kernel: before a graph runs, each
// Gradient node is replaced by the nodes that compute its outputs, built by the engine's
// reverse-mode builder (autodiff/gradient_graph.h).
//
//   Gradient(xs=[x1, ...], zs=[z1, ...], y="y")(inputs...) -> (dy/dx1, ...)
//
// The attributes name a piece of the graph: the nodes that compute y from the values in xs and zs,
// which are taken as independent there (an intermediate value may be named: the piece stops at
// it). The node's inputs, one per name of xs then zs, are the point at which the gradient is
// taken. When they are those very values (the usual case), the backward nodes read the forward
// values the graph already computes; otherwise the piece is cloned, fed by the inputs.
//
// Decisions where the spec is silent, in the engine's usual terms:
//   - y need not be a scalar: the gradient is that of the sum of y's elements (a seed of ones),
//     as PyTorch's autograd.grad(y, xs, grad_outputs=ones_like(y)) computes it;
//   - an x that y does not depend on gets zeros shaped like its input (the partial derivative
//     of a function that does not vary with it), where PyTorch would need allow_unused=True;
//   - values the piece reads besides xs and zs (initializers, other graph inputs) are constants;
//   - a Gradient whose y depends on another Gradient's outputs (higher order) is expanded after
//     that one, so it differentiates through the first one's backward nodes.
// Refused with an error naming the node: names not found in the graph, xs or y not floating,
// inputs that do not match xs and zs one for one, a y that depends on the node's own outputs,
// and Gradient nodes inside control-flow bodies.
#include "ir/graph.h"

namespace onnxtrain {

// Expands every Gradient node of `graph` (a no-op when there is none); returns how many. Runs
// shape inference first, since the gradient rules read element types and shapes.
int expand_gradient_ops(Graph& graph);

}  // namespace onnxtrain
