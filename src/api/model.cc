// onnxtrain::Model: an ONNX file, checked by onnx.checker and loaded by the engine's loader.
#include "api/model.h"

#include <algorithm>

#include "api/model_state.h"
#include "core/error.h"
#include "onnx/model_io.h"

namespace onnxtrain {

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Model Model::from_bytes(const std::string& bytes) {
  auto impl = std::make_unique<Impl>();
  api::check_model_bytes(bytes, "the model");
  impl->graph = load_model(bytes);
  impl->bytes = bytes;
  return Model(std::move(impl));
}

Model Model::load(const std::string& path) {
  api::require_file(path, "model file");
  try {
    return from_bytes(api::read_file_bytes(path));
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(str_cat("model '", path, "': ", e.what()));
  } catch (const Error& e) {
    OT_THROW("model '", path, "': ", e.what());
  }
}

std::vector<std::string> Model::input_names() const {
  std::vector<std::string> out;
  for (const auto& in : impl_->graph.inputs)
    if (!impl_->graph.is_initializer(in)) out.push_back(in);
  return out;
}

std::vector<std::string> Model::output_names() const { return impl_->graph.outputs; }

std::vector<std::string> Model::parameter_names() const { return api::parameter_names(impl_->graph); }

std::vector<std::string> Model::state_names() const {
  return api::state_names(api::find_batchnorm_state(impl_->graph));
}

namespace api {

std::vector<std::string> parameter_names(const Graph& graph) {
  const std::vector<std::string> state = state_names(find_batchnorm_state(graph));
  std::vector<std::string> out;
  for (const auto& name : graph.initializer_order) {
    // Initializers also listed as inputs (keep_initializers_as_inputs) are weights all the same.
    const bool is_state = std::count(state.begin(), state.end(), name) > 0;
    if (is_floating(graph.initializers.at(name).dtype()) && !is_state) out.push_back(name);
  }
  return out;
}

}  // namespace api
}  // namespace onnxtrain
