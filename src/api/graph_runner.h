#pragma once
// One ONNX model run whole by the engine (its InferenceSession). A separate file because the
// engine's session header declares an onnxtrain::TrainingSession of its own, which no file may
// see together with the public onnxtrain::TrainingSession (the lookup would be ambiguous).
#include <memory>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {
class InferenceSession;

namespace api {

class GraphRunner {
 public:
  explicit GraphRunner(Graph graph);
  ~GraphRunner();
  // Inputs and outputs follow the graph's; `seed` drives its random ops.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t seed);

 private:
  std::unique_ptr<InferenceSession> session_;
};

}  // namespace api
}  // namespace onnxtrain
