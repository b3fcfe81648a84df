// onnxtrain::TrainingSession: runs the artifacts of generate_artifacts. The training model computes
// the loss, the gradients and the next state (BatchNorm statistics) in one engine run; the optimizer
// model turns parameters, gradients and optimizer state into their next values; the checkpoint
// holds everything between steps.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "api/internal.h"
#include "audit/node_audit.h"
#include "core/error.h"
#include "onnx/model_io.h"
#include "api/graph_runner.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

std::string few(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 5) s += str_cat(" and ", names.size() - 5, " more");
  return s;
}

std::string declared(const ValueInfo& vi) {
  std::string s = std::string(dtype_name(vi.dtype)) + "[";
  if (!vi.shape) return s + "any shape]";
  for (size_t i = 0; i < vi.shape->size(); ++i) {
    const Dim& d = (*vi.shape)[i];
    s += (i ? "x" : "") + (d.is_static() ? std::to_string(d.value) : (d.symbol.empty() ? "?" : d.symbol));
  }
  return s + "]";
}

bool fits(const ValueInfo& vi, const Tensor& t) {
  if (vi.dtype != DType::Undefined && vi.dtype != t.dtype()) return false;
  if (!vi.shape) return true;
  if (static_cast<int>(vi.shape->size()) != t.rank()) return false;
  for (int d = 0; d < t.rank(); ++d)
    if ((*vi.shape)[static_cast<size_t>(d)].is_static() && (*vi.shape)[static_cast<size_t>(d)].value != t.dim(d)) return false;
  return true;
}

ValueInfo info_of(const Graph& g, const std::string& name) {
  const ValueInfo* vi = g.info(name);
  return vi ? *vi : ValueInfo{};
}

bool absent(const Array& a) { return a.shape.empty() && a.bytes.empty(); }

}  // namespace

struct TrainingSession::Impl {
  std::string dir;
  api::Checkpoint checkpoint;
  std::unique_ptr<api::GraphRunner> training, eval, optimizer;
  std::vector<std::string> training_inputs, eval_inputs;
  // The data inputs: x, and the target y when the models take one.
  std::string x_name, y_name;
  ValueInfo x_info, y_info, output_info;
  std::map<std::string, ValueInfo> stored_info;  // the models' declaration of each parameter and state tensor
  size_t optimizer_inputs = 0;

  // A parameter or state tensor of the checkpoint; null for other names.
  const Tensor* stored(const std::string& name) const {
    for (const auto* values : {&checkpoint.parameters, &checkpoint.state}) {
      auto it = values->find(name);
      if (it != values->end()) return &it->second;
    }
    return nullptr;
  }

  std::vector<Tensor> feed(const std::vector<std::string>& inputs, const Tensor& x, const Tensor& y) const {
    std::vector<Tensor> out;
    for (const auto& name : inputs) {
      if (name == x_name) out.push_back(x);
      else if (name == y_name) out.push_back(y);
      else out.push_back(*stored(name));
    }
    return out;
  }

  void check_batch(const Tensor& x, const Tensor& y) const;
  // x and y as tensors, checked against the models' inputs.
  std::pair<Tensor, Tensor> batch(const Array& x, const Array& y) const;
  void check_checkpoint(const api::Checkpoint& c, const std::string& path) const;
};

std::pair<Tensor, Tensor> TrainingSession::Impl::batch(const Array& x, const Array& y) const {
  const Tensor xt = api::to_tensor(x, "x");
  Tensor yt;
  if (y_name.empty()) OT_CHECK(absent(y), "the model takes no target, so y must be an empty Array, got ",
                               api::shape_string(y.shape));
  else yt = api::to_tensor(y, "y");
  check_batch(xt, yt);
  return {xt, yt};
}

void TrainingSession::Impl::check_batch(const Tensor& x, const Tensor& y) const {
  OT_CHECK(fits(x_info, x), "x does not fit the model's input '", x_name, "': expected ", declared(x_info), ", got ",
           x.str());
  if (y_name.empty()) return;
  const int64_t n = x.rank() > 0 ? x.dim(0) : 1;
  if (checkpoint.loss == Loss::CrossEntropy) {
    OT_CHECK(y.dtype() == DType::Int64 && y.rank() == 1 && y.dim(0) == n, "y does not fit the labels '", y_name,
             "': expected int64[", n, "] (one class index per row of x ", x.str(), "), got ", y.str());
    const int64_t classes = output_info.shape && output_info.shape->size() >= 2 ? (*output_info.shape)[1].value : -1;
    const int64_t* labels = y.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      OT_CHECK(labels[i] >= 0 && (classes < 0 || labels[i] < classes), "y[", i, "] is class ", labels[i],
               ", outside the model's ", classes < 0 ? std::string("classes") : str_cat(classes, " classes (0..", classes - 1, ")"));
    return;
  }
  bool ok = fits(y_info, y);
  if (checkpoint.loss == Loss::MSE) ok = ok && y.rank() > 0 && y.dim(0) == n;
  OT_CHECK(ok, "y does not fit the model's ", checkpoint.loss == Loss::MSE ? "target '" : "input '", y_name, "': expected ",
           declared(y_info), checkpoint.loss == Loss::MSE ? str_cat(" with ", n, " rows like x ", x.str()) : "", ", got ",
           y.str());
}

void TrainingSession::Impl::check_checkpoint(const api::Checkpoint& c, const std::string& path) const {
  OT_CHECK(c.trainable == checkpoint.trainable && c.frozen == checkpoint.frozen &&
               c.state_names == checkpoint.state_names && c.optimizer == checkpoint.optimizer && c.loss == checkpoint.loss,
           "checkpoint '", path, "' belongs to other artifacts: it trains ", few(c.trainable), " with ",
           api::optimizer_name(c.optimizer), ", the artifacts in '", dir, "' train ", few(checkpoint.trainable), " with ",
           api::optimizer_name(checkpoint.optimizer));
  for (const auto* values : {&c.parameters, &c.state}) {
    for (const auto& kv : *values) {
      const ValueInfo& vi = stored_info.at(kv.first);
      OT_CHECK(fits(vi, kv.second), "checkpoint '", path, "': ", values == &c.state ? "state" : "parameter", " '",
               kv.first, "' is ", kv.second.str(), ", the models expect ", declared(vi));
    }
  }
  for (size_t s = 0; s < c.optimizer_states.size(); ++s)
    for (size_t i = 0; i < c.trainable.size(); ++i)
      OT_CHECK(c.optimizer_states[s][i].dtype() == c.parameters.at(c.trainable[i]).dtype() &&
                   c.optimizer_states[s][i].shape() == c.parameters.at(c.trainable[i]).shape(),
               "checkpoint '", path, "': optimizer state '", api::optimizer_state_names(c.optimizer)[s], "' of '",
               c.trainable[i], "' is ", c.optimizer_states[s][i].str(), ", unlike its parameter");
  OT_CHECK(c.step >= 0, "checkpoint '", path, "' has a negative step count ", c.step);
}

TrainingSession::TrainingSession(const std::string& artifacts_dir, const std::string& checkpoint_path,
                                 const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.dir = artifacts_dir;
  OT_CHECK(options.threads >= 0, "SessionOptions::threads must be >= 0 (0: every core), got ", options.threads);
  OT_CHECK(std::filesystem::is_directory(artifacts_dir), "the artifacts directory '", artifacts_dir, "' does not exist");
  const std::filesystem::path dir(artifacts_dir);
  const std::string training_path = (dir / api::kTrainingModelFile).string();
  const std::string eval_path = (dir / api::kEvalModelFile).string();
  const std::string optimizer_path = (dir / api::kOptimizerModelFile).string();
  const std::string ckpt_path = checkpoint_path.empty() ? (dir / api::kCheckpointFile).string() : checkpoint_path;
  for (const auto& p : {training_path, eval_path, optimizer_path}) api::require_file(p, "artifact");
  if (options.threads > 0) ThreadPool::set_num_threads(options.threads);

  s.checkpoint = api::read_checkpoint(ckpt_path);
  Graph training = load_model_file(training_path);
  Graph eval = load_model_file(eval_path);
  Graph optimizer = load_model_file(optimizer_path);

  // Data inputs are the inputs that are neither parameters nor state: x, then y.
  std::vector<std::string> data;
  for (const auto& in : training.inputs)
    if (!s.stored(in)) data.push_back(in);
  OT_CHECK(data.size() == 1 || data.size() == 2, "'", training_path, "' takes ", data.size(), " inputs besides the "
           "checkpoint's parameters and state (", few(data), "); one (x) or two (x, y) expected: do the checkpoint '", ckpt_path,
           "' and the models come from the same generate_artifacts?");
  s.x_name = data[0];
  s.y_name = data.size() == 2 ? data[1] : "";
  s.x_info = info_of(training, s.x_name);
  if (!s.y_name.empty()) s.y_info = info_of(training, s.y_name);
  if (eval.outputs.size() > 1) s.output_info = info_of(eval, eval.outputs[1]);
  for (const auto* values : {&s.checkpoint.parameters, &s.checkpoint.state}) {
    for (const auto& kv : *values) {
      OT_CHECK(training.is_input(kv.first), "the checkpoint's ", values == &s.checkpoint.state ? "state" : "parameter",
               " '", kv.first, "' is not an input of '", training_path, "'");
      s.stored_info[kv.first] = info_of(training, kv.first);
    }
  }
  const size_t gradients = s.checkpoint.trainable.size(), state = s.checkpoint.state_names.size();
  OT_CHECK(training.outputs.size() == 1 + gradients + state, "'", training_path, "' has ", training.outputs.size(),
           " outputs; the loss, ", gradients, " gradients and ", state, " new state tensors expected");
  const size_t n = s.checkpoint.trainable.size(), states = s.checkpoint.optimizer_states.size();
  s.optimizer_inputs = 2 + n * (2 + states);
  OT_CHECK(optimizer.inputs.size() == s.optimizer_inputs && optimizer.outputs.size() == n * (1 + states), "'",
           optimizer_path, "' does not fit the checkpoint: it takes ", optimizer.inputs.size(), " inputs and ",
           optimizer.outputs.size(), " outputs, ", s.optimizer_inputs, " and ", n * (1 + states), " expected");
  for (const auto& in : eval.inputs)
    OT_CHECK(in == s.x_name || in == s.y_name || s.stored(in), "'", eval_path, "' takes input '", in,
             "', which the training model does not have");
  s.check_checkpoint(s.checkpoint, ckpt_path);

  s.training_inputs = training.inputs;
  s.eval_inputs = eval.inputs;
  s.training = std::make_unique<api::GraphRunner>(std::move(training));
  s.eval = std::make_unique<api::GraphRunner>(std::move(eval));
  s.optimizer = std::make_unique<api::GraphRunner>(std::move(optimizer));
}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;
TrainingSession& TrainingSession::operator=(TrainingSession&&) noexcept = default;

std::vector<std::string> TrainingSession::trainable_parameters() const { return impl_->checkpoint.trainable; }

Array TrainingSession::parameter(const std::string& name) const {
  auto it = impl_->checkpoint.parameters.find(name);
  if (it == impl_->checkpoint.parameters.end()) {
    std::vector<std::string> names = impl_->checkpoint.trainable;
    names.insert(names.end(), impl_->checkpoint.frozen.begin(), impl_->checkpoint.frozen.end());
    OT_THROW("the session has no parameter '", name, "'; parameters are ", few(names));
  }
  return api::to_array(it->second);
}

std::vector<std::string> TrainingSession::state_names() const { return impl_->checkpoint.state_names; }

Array TrainingSession::state(const std::string& name) const {
  auto it = impl_->checkpoint.state.find(name);
  if (it == impl_->checkpoint.state.end()) {
    const auto& names = impl_->checkpoint.state_names;
    OT_THROW("the session has no state tensor '", name, "'; ",
             names.empty() ? std::string("it has none (no training-mode BatchNorm)") : "state tensors are " + few(names));
  }
  return api::to_array(it->second);
}

void TrainingSession::set_learning_rate(double lr) {
  OT_CHECK(std::isfinite(lr) && lr >= 0, "the learning rate must be a finite number >= 0, got ", lr);
  impl_->checkpoint.learning_rate = lr;
}

double TrainingSession::learning_rate() const { return impl_->checkpoint.learning_rate; }
int64_t TrainingSession::step_count() const { return impl_->checkpoint.step; }

float TrainingSession::train_step(const Array& x, const Array& y) {
  Impl& s = *impl_;
  const auto [xt, yt] = s.batch(x, y);
  // The step count seeds the run: random ops (dropout) draw the same values after a resume.
  const uint64_t seed = static_cast<uint64_t>(s.checkpoint.step);
  const std::vector<Tensor> out = s.training->run(s.feed(s.training_inputs, xt, yt), seed);
  const size_t n = s.checkpoint.trainable.size();
  std::vector<Tensor> inputs{Tensor::scalar<double>(s.checkpoint.learning_rate), Tensor::scalar<int64_t>(s.checkpoint.step)};
  for (const auto& name : s.checkpoint.trainable) inputs.push_back(s.checkpoint.parameters.at(name));
  for (size_t i = 0; i < n; ++i) inputs.push_back(out[1 + i]);
  for (const auto& list : s.checkpoint.optimizer_states) inputs.insert(inputs.end(), list.begin(), list.end());
  const std::vector<Tensor> updated = s.optimizer->run(inputs, 0);
  for (size_t i = 0; i < n; ++i) s.checkpoint.parameters[s.checkpoint.trainable[i]] = updated[i];
  for (size_t k = 0; k < s.checkpoint.optimizer_states.size(); ++k)
    for (size_t i = 0; i < n; ++i) s.checkpoint.optimizer_states[k][i] = updated[n * (1 + k) + i];
  for (size_t k = 0; k < s.checkpoint.state_names.size(); ++k)
    s.checkpoint.state[s.checkpoint.state_names[k]] = out[1 + n + k];
  ++s.checkpoint.step;
  return static_cast<float>(out[0].item_as_double());
}

std::vector<NodeAuditResult> TrainingSession::audit_step(const Array& x, const Array& y) {
  Impl& s = *impl_;
  const auto [xt, yt] = s.batch(x, y);
  auto observer = std::make_shared<audit::AuditObserver>("training");
  s.training->run(s.feed(s.training_inputs, xt, yt), static_cast<uint64_t>(s.checkpoint.step), observer);
  std::vector<NodeAuditResult> out;
  for (const audit::NodeAudit& row : observer->rows()) {
    NodeAuditResult r;
    r.node = row.node;
    r.op_type = row.domain.empty() ? row.op_type : row.domain + "::" + row.op_type;
    r.compared = row.rel_error.has_value();
    r.rel_error = row.rel_error.value_or(0.0);
    r.normalization = row.normalization;
    r.reason = row.reason;
    r.worst_output = row.worst_output;
    for (const TensorShape& shape : row.output_shapes) r.output_shapes.push_back(shape.to_vector());
    out.push_back(std::move(r));
  }
  return out;
}

EvalResult TrainingSession::evaluate(const Array& x, const Array& y) {
  Impl& s = *impl_;
  const auto [xt, yt] = s.batch(x, y);
  const std::vector<Tensor> out = s.eval->run(s.feed(s.eval_inputs, xt, yt), static_cast<uint64_t>(s.checkpoint.step));
  EvalResult r;
  r.loss = out[0].item_as_double();
  r.examples = xt.rank() > 0 ? xt.dim(0) : 1;
  if (s.checkpoint.loss == Loss::CrossEntropy && out.size() > 1 && out[1].rank() == 2) {
    const Tensor& logits = out[1];
    const int64_t classes = logits.dim(1);
    const int64_t* labels = yt.data<int64_t>();
    int64_t correct = 0;
    for (int64_t i = 0; i < logits.dim(0); ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (logits.item_as_double(i * classes + c) > logits.item_as_double(i * classes + best)) best = c;
      correct += best == labels[i];
    }
    r.accuracy = r.examples ? static_cast<double>(correct) / static_cast<double>(r.examples) : 0.0;
  }
  return r;
}

void TrainingSession::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  api::Checkpoint c = impl_->checkpoint;
  c.metadata = metadata;
  api::write_checkpoint(path, c);
}

std::map<std::string, std::string> TrainingSession::load_checkpoint(const std::string& path) {
  api::Checkpoint c = api::read_checkpoint(path);
  impl_->check_checkpoint(c, path);
  impl_->checkpoint = std::move(c);
  return impl_->checkpoint.metadata;
}

void TrainingSession::export_inference_model(const std::string& path) const {
  const std::string source = (std::filesystem::path(impl_->dir) / api::kInferenceModelFile).string();
  api::require_file(source, "artifact");
  std::map<std::string, Tensor> values = impl_->checkpoint.parameters;
  values.insert(impl_->checkpoint.state.begin(), impl_->checkpoint.state.end());
  api::write_file_bytes(path, api::replace_initializers(api::read_file_bytes(source), values));
}

}  // namespace onnxtrain
