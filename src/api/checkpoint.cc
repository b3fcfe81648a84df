// The checkpoint file: a zip (stored, uncompressed, like numpy.savez) of .npy arrays and one JSON
// entry, written and read through src/io/npz.h. numpy.load reads it as an .npz. Arrays are written
// byte for byte, so a save and a load give back bit-identical parameters, state and optimizer state.
#include <nlohmann/json.hpp>

#include "api/internal.h"
#include "core/error.h"
#include "io/durable_file.h"
#include "io/npz.h"

namespace onnxtrain::api {
namespace {

constexpr const char* kJsonEntry = "checkpoint.json";
constexpr const char* kFormat = "onnxtrain-checkpoint";
constexpr int kVersion = 2;  // 2 added the state; a version 1 checkpoint has none

std::string parameter_entry(const std::string& name) { return "parameters/" + name + ".npy"; }
std::string model_state_entry(const std::string& name) { return "state/" + name + ".npy"; }
std::string optimizer_state_entry(const std::string& state, const std::string& name) {
  return "optimizer/" + state + "/" + name + ".npy";
}

std::string npy_bytes(const Tensor& t) { return io::format_npy(to_array(t)); }

}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  const std::vector<std::string> state_names = optimizer_state_names(c.optimizer);
  OT_CHECK(c.optimizer_states.size() == state_names.size(), "checkpoint: ", state_names.size(), " optimizer states expected");
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["loss"] = loss_name(c.loss);
  j["optimizer"] = optimizer_name(c.optimizer);
  j["optimizer_state"] = state_names;
  j["trainable"] = c.trainable;
  j["frozen"] = c.frozen;
  j["state"] = c.state_names;
  j["step"] = c.step;
  j["learning_rate"] = c.learning_rate;  // JSON numbers round-trip doubles exactly in nlohmann
  j["hyperparameters"] = c.hyperparameters;
  j["metadata"] = c.metadata;

  std::map<std::string, std::string> entries{{kJsonEntry, j.dump(2)}};
  for (const auto& name : c.trainable) entries[parameter_entry(name)] = npy_bytes(c.parameters.at(name));
  for (const auto& name : c.frozen) entries[parameter_entry(name)] = npy_bytes(c.parameters.at(name));
  for (const auto& name : c.state_names) entries[model_state_entry(name)] = npy_bytes(c.state.at(name));
  for (size_t s = 0; s < state_names.size(); ++s) {
    OT_CHECK(c.optimizer_states[s].size() == c.trainable.size(), "checkpoint: optimizer state '", state_names[s],
             "' has ", c.optimizer_states[s].size(), " tensors for ", c.trainable.size(), " parameters");
    for (size_t i = 0; i < c.trainable.size(); ++i)
      entries[optimizer_state_entry(state_names[s], c.trainable[i])] = npy_bytes(c.optimizer_states[s][i]);
  }
  // A temporary name and a durable rename: an interrupted save or a power loss leaves the previous
  // checkpoint intact.
  const std::string tmp = path + ".tmp";
  io::write_zip(tmp, entries);
  io::replace_file_durably(tmp, path);
}

Checkpoint read_checkpoint(const std::string& path) {
  require_file(path, "checkpoint");
  std::map<std::string, std::string> entries;
  try {
    entries = io::read_zip(path, "checkpoint");
  } catch (const Error& e) {
    OT_THROW("'", path, "' is not a checkpoint: ", e.what());
  }
  auto it = entries.find(kJsonEntry);
  OT_CHECK(it != entries.end(), "'", path, "' is not an onnxtrain checkpoint: it has no ", kJsonEntry);
  Checkpoint c;
  try {
    const nlohmann::json j = nlohmann::json::parse(it->second);
    OT_CHECK(j.value("format", "") == kFormat, "its format is '", j.value("format", ""), "'");
    OT_CHECK(j.at("version").get<int>() <= kVersion, "it has version ", j.at("version").get<int>(),
             ", newer than this onnxtrain reads (", kVersion, ")");
    c.loss = loss_from_name(j.at("loss").get<std::string>());
    c.optimizer = optimizer_from_name(j.at("optimizer").get<std::string>());
    c.trainable = j.at("trainable").get<std::vector<std::string>>();
    c.frozen = j.at("frozen").get<std::vector<std::string>>();
    c.state_names = j.value("state", std::vector<std::string>{});
    c.step = j.at("step").get<int64_t>();
    c.learning_rate = j.at("learning_rate").get<double>();
    c.hyperparameters = j.value("hyperparameters", std::map<std::string, std::string>{});
    c.metadata = j.value("metadata", std::map<std::string, std::string>{});
  } catch (const nlohmann::json::exception& e) {
    OT_THROW("checkpoint '", path, "' has malformed metadata: ", e.what());
  } catch (const Error& e) {
    OT_THROW("checkpoint '", path, "': ", e.what());
  }
  auto take = [&](const std::string& entry) {
    auto found = entries.find(entry);
    OT_CHECK(found != entries.end(), "checkpoint '", path, "' lacks the array '", entry, "'");
    return to_tensor(io::parse_npy(found->second, "checkpoint entry '" + entry + "'"), "checkpoint entry '" + entry + "'");
  };
  for (const auto& name : c.trainable) c.parameters[name] = take(parameter_entry(name));
  for (const auto& name : c.frozen) c.parameters[name] = take(parameter_entry(name));
  for (const auto& name : c.state_names) c.state[name] = take(model_state_entry(name));
  for (const auto& state : optimizer_state_names(c.optimizer)) {
    c.optimizer_states.emplace_back();
    for (const auto& name : c.trainable) c.optimizer_states.back().push_back(take(optimizer_state_entry(state, name)));
  }
  return c;
}

}  // namespace onnxtrain::api
