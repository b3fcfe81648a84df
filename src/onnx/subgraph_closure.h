#pragma once
// ONNX's If, Loop and Scan bodies read values of the enclosing graph by name. Our executor
// frees a value after its last reader and plans memory from explicit inputs only, so at load
// every such node becomes its closed form (domain ai.onnxtrain, same op type): the outer values
// its bodies read are appended to the node's inputs and to each body's inputs, under the same
// names. The bodies then are ordinary graphs, and the gradient builder can differentiate them.
#include "ir/graph.h"

namespace onnxtrain {

// Closes every If, Loop and Scan of `graph`, innermost first; bodies inherit the graph's
// opsets. Declares the dtype of an If's outputs from its branches when the model left it out.
void close_subgraphs(Graph& graph);

// The names `body` reads that it neither defines nor takes as inputs, in first-use order.
std::vector<std::string> free_values(const Graph& body);

// ONNX ops with bodies that close_subgraphs closes: If, Loop, Scan, SequenceMap.
bool is_closed_op_type(const std::string& op_type);

// True for the closed forms close_subgraphs produces.
bool is_closed_control_flow(const Node& node);

}  // namespace onnxtrain
