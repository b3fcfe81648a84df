#include "api/graph_runner.h"

#include "session/training_session.h"

namespace onnxtrain::api {

GraphRunner::GraphRunner(Graph graph) : session_(std::make_unique<InferenceSession>(std::move(graph))) {}
GraphRunner::~GraphRunner() = default;

std::vector<Tensor> GraphRunner::run(const std::vector<Tensor>& inputs, uint64_t seed,
                                     std::shared_ptr<NodeObserver> observer) {
  return session_->run(inputs, seed, std::move(observer));
}

}  // namespace onnxtrain::api
