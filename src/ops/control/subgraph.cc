#include "ops/control/subgraph.h"

#include <atomic>
#include <cstdlib>

#include "runtime/executor.h"
#include "runtime/program.h"

namespace onnxtrain {

CompiledBody::CompiledBody(const Node& node, const std::string& attribute) : describe_(node.describe()) {
  auto it = node.attrs.find(attribute);
  OT_CHECK(it != node.attrs.end() && it->second.kind == Attribute::Kind::Graph && it->second.g, describe_,
           " has no graph attribute '", attribute, "'");
  const Graph& body = *it->second.g;
  num_inputs_ = static_cast<int>(body.inputs.size());
  num_outputs_ = static_cast<int>(body.outputs.size());
  try {
    program_ = std::make_unique<Program>(body);
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(str_cat("the '", attribute, "' body of ", describe_, ": ", e.what()));
  } catch (const Error& e) {
    OT_THROW("compiling the '", attribute, "' body of ", describe_, ": ", e.what());
  }
  for (const auto& in : program_->graph().inputs) input_ids_.push_back(program_->value_id(in));
  for (const auto& out : program_->graph().outputs) output_ids_.push_back(program_->value_id(out));
}

CompiledBody::~CompiledBody() = default;

std::vector<Tensor> CompiledBody::run(const std::vector<Tensor>& inputs, const KernelContext& ctx) const {
  OT_CHECK(static_cast<int>(inputs.size()) == num_inputs_, describe_, ": its body takes ", num_inputs_,
           " inputs, the node gives ", inputs.size());
  RunState state(*program_, ctx.random_seed(), ctx.threads());
  for (size_t i = 0; i < inputs.size(); ++i) state.values[static_cast<size_t>(input_ids_[i])] = inputs[i];
  execute(state, 0, program_->nodes().size(), "subgraph");
  std::vector<Tensor> outputs;
  outputs.reserve(output_ids_.size());
  for (int id : output_ids_) {
    const Tensor& t = state.values[static_cast<size_t>(id)];
    OT_CHECK(t.defined(), describe_, ": its body did not produce output '", program_->value_name(id), "'");
    // An output may still view an input or a constant of the body: give it its own memory.
    outputs.push_back(t.holder() ? t : t.clone());
  }
  return outputs;
}

namespace {
std::atomic<int64_t> g_loop_limit_override{0};

int64_t loop_limit_from_environment() {
  const char* env = std::getenv("ONNXTRAIN_MAX_LOOP_ITERATIONS");
  if (!env) return 100'000'000;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  OT_CHECK(end != env && *end == '\0' && v > 0, "ONNXTRAIN_MAX_LOOP_ITERATIONS must be a positive count, got '",
           env, "'");
  return v;
}
}  // namespace

int64_t loop_iteration_limit() {
  const int64_t forced = g_loop_limit_override.load();
  if (forced > 0) return forced;
  static const int64_t from_environment = loop_limit_from_environment();
  return from_environment;
}

void set_loop_iteration_limit(int64_t limit) { g_loop_limit_override.store(limit > 0 ? limit : 0); }

std::vector<Tensor> inputs_from(const KernelContext& ctx, int first) {
  std::vector<Tensor> out;
  for (int i = first; i < ctx.num_inputs(); ++i) out.push_back(ctx.has_input(i) ? ctx.input(i) : Tensor());
  return out;
}

void write_output(KernelContext& ctx, int i, const Tensor& value) {
  if (!ctx.output_needed(i)) return;
  if (value.is_list()) ctx.set_list_output(i, value);
  else ctx.allocate_output(i, value.dtype(), value.shape()).copy_from(value);
}

}  // namespace onnxtrain
