#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {

// Checks tensors fed to a graph against its declared inputs: count, element type, rank and the
// static dims. Throws an Error naming the input and both shapes.
void check_inputs(const Graph& graph, const std::vector<std::string>& names, const std::vector<Tensor>& inputs);

}  // namespace onnxtrain
