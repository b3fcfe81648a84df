#pragma once
// Model's insides, shared by model.cc and artifacts.cc.
#include "api/internal.h"

namespace onnxtrain {

struct Model::Impl {
  Graph graph;        // as the engine's loader gives it
  std::string bytes;  // the file as given: the artifacts keep it for export_inference_model
};

namespace api {
// The floating-point initializers that are not state (api/model_state.h), in file order: what can train.
std::vector<std::string> parameter_names(const Graph& graph);
}  // namespace api

}  // namespace onnxtrain
