#pragma once
// The graph optimizer: which passes run, in what order, at which level. Each pass lives in its own
// file (passes/*.cc, declared in passes/passes.h) and is tested alone for structure and for
// numerical identity with the unoptimized graph (tests/cpp/test_passes_*.cc).
//
// Level 0 runs nothing (ONNXTRAIN_OPT_LEVEL=0, or DebugOptions(optimization_level=0)); level 1,
// the default, runs everything.
#include "ir/graph.h"

namespace onnxtrain {

// `level` < 0 means "ONNXTRAIN_OPT_LEVEL, default 1".
int resolve_opt_level(int level);

// Before differentiation, on the forward graph: simplifications whose result the gradient rules
// differentiate as they are (constants folded, duplicates merged, transposes absorbed into
// matrix products), so that the backward never computes what they removed.
void optimize_before_autodiff(Graph& graph, int level);

// Just before differentiation, in training only: forward ops take the forms whose backward reads
// what the forward saved instead of recomputing it (LSTM's gates).
void prepare_for_autodiff(Graph& graph, int level);

// After differentiation, on the joint graph: fusions of forward nodes with forward nodes and of
// backward nodes with backward nodes (Node::in_backward) into kernels that need no gradient rule.
// Graph outputs keep their names.
void optimize_after_autodiff(Graph& graph, int level);

}  // namespace onnxtrain
