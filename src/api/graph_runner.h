#pragma once
// One ONNX model run whole by the engine (its InferenceSession). A separate file because the
// engine's session header declares an onnxtrain::TrainingSession of its own, which no file may
// see together with the public onnxtrain::TrainingSession (the lookup would be ambiguous).
#include <memory>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {
class InferenceSession;
class NodeObserver;

namespace api {

class GraphRunner {
 public:
  explicit GraphRunner(Graph graph);
  ~GraphRunner();
  // Inputs and outputs follow the graph's; `seed` drives its random ops; `observer` sees every
  // node as it runs (the numerics audit).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t seed,
                          std::shared_ptr<NodeObserver> observer = nullptr);

 private:
  std::unique_ptr<InferenceSession> session_;
};

}  // namespace api
}  // namespace onnxtrain
