#pragma once
// The optimizer's passes, one per file in src/passes/. Each rewrites `graph` in place, keeps its
// node order valid and its graph outputs' names, and returns whether it changed anything.
#include "ir/graph.h"

namespace onnxtrain {

// dead_nodes.cc: drops nodes whose outputs nothing reads (random ops included: an unread draw
// changes no result), and initializers no node reads.
bool eliminate_dead_nodes(Graph& graph);

// common_subexpressions.cc: merges nodes with the same op, attributes and inputs (random ops
// excepted: two draws are not one).
bool eliminate_common_subexpressions(Graph& graph);

// constant_folding.cc: computes nodes whose inputs are all constant (initializers, Constant
// nodes) with the engine's own kernels, and shapes that the declared static dims already fix
// (Shape of a static value; Gather and Slice of a Shape along static dims).
bool fold_constants(Graph& graph);

// cast_folding.cc: a Cast to its input's own type, and the second Cast of an exact widening cast
// back (bfloat16 -> float32 -> bfloat16), are read through: their readers read the original value.
bool fold_casts(Graph& graph);

// float32_sums.cc: a 16-bit gradient summed in float32 and at once widened back by a Cast (a
// parameter's under autocast) is written as float32 by the op that summed it; the Cast goes.
bool write_float32_sums(Graph& graph);

// if_inlining.cc: an If whose condition is constant becomes the nodes of the branch it takes.
bool inline_constant_ifs(Graph& graph);

// lstm_training.cc: before autodiff, an LSTM becomes ai.onnxtrain::LSTMTraining, whose extra
// outputs (activated gates, cell states) spare its backward the recompute.
bool stash_lstm_gates(Graph& graph);

// transpose_folding.cc: MatMul, FusedMatMul and Gemm read a transposed operand through their
// transpose flags instead of a Transpose node, when the Transpose swaps the last two axes.
bool fold_transposes_into_matmul(Graph& graph);

// elementwise_fusion.cc: chains of elementwise ops of one shape, phase and float type become one
// ai.onnxtrain::FusedElementwise loop (each op's record says whether it can join: OpRecord::elementwise).
bool fuse_elementwise(Graph& graph);

// matmul_bias.cc: Add(MatMul(a, b), bias row) becomes FusedMatMul(a, b, bias), the bias written
// into the output before the GEMM accumulates onto it.
bool fuse_matmul_bias(Graph& graph);

// log_softmax_loss.cc: before autodiff, NegativeLogLikelihoodLoss of a LogSoftmax along the class
// axis (torch.export's cross_entropy) becomes one SoftmaxCrossEntropyLoss of the scores.
bool fuse_log_softmax_loss(Graph& graph);

// softmax_statistics.cc: a softmax cross-entropy's backward reads the log-sum-exp its forward
// computed instead of recomputing it from the scores.
bool share_softmax_statistics(Graph& graph);

// checkpoint_segments.cc: at load, before anything else: the ai.onnxtrain::CheckpointBegin and
// CheckpointEnd markers around torch.utils.checkpoint segments become Node::recompute flags on
// the segments' nodes, and the markers are removed.
bool mark_checkpoint_segments(Graph& graph);

// recompute.cc: after autodiff, on the joint graph, whatever the optimization level: backward
// recomputes the activations of checkpointed segments (Node::recompute) and, with
// `cheap_activations`, those of elementwise ops, activations and normalizations whose inputs it
// keeps anyway, instead of reading them from the stash. Random draws are never redrawn (a
// Dropout is recomputed from its mask). Returns the forward values the stash no longer holds.
std::vector<std::string> recompute_activations(Graph& joint, bool cheap_activations);

}  // namespace onnxtrain
