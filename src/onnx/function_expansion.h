#pragma once
// Expansion of ONNX function ops: many ONNX ops (MeanVarianceNormalization, HannWindow, ...) are
// defined by a function body in their schema, a small graph of more primitive ops. A node that
// onnxtrain has no kernel for but whose schema has such a body is replaced by the body's nodes,
// so that the kernels and the gradient builder only ever see primitive ops. Ops that have a
// kernel are never expanded: the kernel is faster and its gradient rule exact.
#include <string>

#include "ir/graph.h"

namespace onnxtrain {

// True when (domain, op_type) has no onnxtrain kernel and ONNX defines it at `opset` by a
// function body (plain or built from the node's attributes and input types): expand_functions
// would try to expand it. Whether the body's own ops have kernels is not checked.
bool is_expandable_function(const std::string& domain, const std::string& op_type, int opset);

// Replaces, in `graph` and in the subgraphs of its control-flow nodes, every node that
// is_expandable_function names by the nodes of its function body, recursively (a body's own
// function ops are expanded too, to a bounded depth). Body values get fresh names, unique in the
// whole model; attribute references (ref_attr_name) are resolved from the node, falling back to
// the schema's defaults. A body is left unexpanded, and its node kept, when one of its ops means
// something else at the model's opset than at the body's (the kernel lookup then names the op).
void expand_functions(Graph& graph);

}  // namespace onnxtrain
