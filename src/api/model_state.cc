// Training state (api/model_state.h): which initializers are BatchNorm statistics, and the forms
// of the BatchNormalization nodes that read them in the training, eval and inference models.
#include "api/model_state.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "ops/nn/batch_norm.h"

namespace onnxtrain::api {
namespace {

constexpr const char* kRunningMean = "running_mean";

bool is_onnx_batchnorm(const std::string& domain, const std::string& op_type) {
  return (domain.empty() || domain == "ai.onnx") && op_type == "BatchNormalization";
}

bool is_float_initializer(const Graph& graph, const std::string& name) {
  return graph.is_initializer(name) && is_floating(graph.initializers.at(name).dtype());
}

// PyTorch names a BatchNorm's buffers "<module>.running_mean", "<module>.num_batches_tracked".
std::string num_batches_tracked_beside(const Graph& graph, const std::string& running_mean) {
  const size_t suffix = std::string(kRunningMean).size();
  if (running_mean.size() < suffix || running_mean.compare(running_mean.size() - suffix, suffix, kRunningMean) != 0)
    return "";
  const std::string name = running_mean.substr(0, running_mean.size() - suffix) + "num_batches_tracked";
  if (!graph.is_initializer(name) || graph.initializers.at(name).dtype() != DType::Int64) return "";
  return name;
}

// The running statistics become state only if nothing else reads what the node computes from them:
// the eval and inference models drop those outputs.
void check_only_y_is_read(const Graph& graph, const Node& node,
                          const std::unordered_map<std::string, std::vector<size_t>>& consumers) {
  for (size_t i = 1; i < node.outputs.size(); ++i) {
    const std::string& out = node.outputs[i];
    if (out.empty()) continue;
    const bool read = consumers.count(out) || std::count(graph.outputs.begin(), graph.outputs.end(), out);
    OT_CHECK(!read, node.describe(), ": its output ", i, " '", out, "' is read by the model; onnxtrain keeps the "
             "running statistics '", node.inputs[3], "' and '", node.inputs[4], "' as training state and reads "
             "nothing but Y from a training-mode BatchNormalization");
  }
}

Node& node_reading(Graph& graph, const BatchNormState& s) {
  for (Node& n : graph.nodes)
    if (is_onnx_batchnorm(n.domain, n.op_type) && n.has_input(3) && n.inputs[3] == s.running_mean) return n;
  OT_THROW("no BatchNormalization node reads the running mean '", s.running_mean, "'");
}

}  // namespace

std::vector<BatchNormState> find_batchnorm_state(const Graph& graph) {
  std::vector<BatchNormState> found;
  std::map<std::string, std::string> owner;  // running statistic -> the node that updates it
  const auto consumers = graph.consumers();
  for (const Node& n : graph.nodes) {
    if (!is_onnx_batchnorm(n.domain, n.op_type) || n.inputs.size() < 5 || !batchnorm_trains(n, graph.opset())) continue;
    if (!is_float_initializer(graph, n.inputs[3]) || !is_float_initializer(graph, n.inputs[4])) continue;
    OT_CHECK(graph.opset() >= 9 || n.attr_int("spatial", 1) != 0, n.describe(),
             ": training with spatial=0 (statistics per activation) is not supported");
    check_only_y_is_read(graph, n, consumers);
    for (size_t i : {3, 4}) {
      auto [it, fresh] = owner.emplace(n.inputs[i], n.describe());
      OT_CHECK(fresh, n.describe(), " and ", it->second, " both update the running statistic '", n.inputs[i],
               "'; each BatchNormalization needs its own");
    }
    found.push_back({n.inputs[3], n.inputs[4], num_batches_tracked_beside(graph, n.inputs[3])});
  }
  return found;
}

std::vector<std::string> inference_statistics(const Graph& graph) {
  std::vector<std::string> found;
  for (const Node& n : graph.nodes) {
    if (!is_onnx_batchnorm(n.domain, n.op_type) || n.inputs.size() < 5 || batchnorm_trains(n, graph.opset())) continue;
    for (size_t i : {3, 4})
      if (is_float_initializer(graph, n.inputs[i])) found.push_back(n.inputs[i]);
  }
  return found;
}

std::vector<std::string> state_names(const std::vector<BatchNormState>& state) {
  std::vector<std::string> names;
  for (const BatchNormState& s : state) {
    names.push_back(s.running_mean);
    names.push_back(s.running_var);
    if (!s.num_batches_tracked.empty()) names.push_back(s.num_batches_tracked);
  }
  return names;
}

std::vector<std::string> update_state_as_pytorch(Graph& graph, const std::vector<BatchNormState>& state) {
  std::vector<std::string> next;
  std::string one;  // the int64 1 that PyTorch adds to num_batches_tracked in every training forward
  for (const BatchNormState& s : state) {
    Node& node = node_reading(graph, s);
    use_pytorch_batchnorm(graph, node);
    next.push_back(node.outputs[1]);
    next.push_back(node.outputs[2]);
    if (s.num_batches_tracked.empty()) continue;
    if (one.empty()) {
      one = graph.unique_name("one_batch");
      graph.add_initializer(one, Tensor::scalar<int64_t>(1));
    }
    const std::string counted = graph.unique_name(s.num_batches_tracked + ".counted");
    graph.add_node({graph.unique_name("count_batch"), "Add", "", {s.num_batches_tracked, one}, {counted}, {}});
    if (const ValueInfo* vi = graph.info(s.num_batches_tracked)) graph.info_mut(counted) = *vi;
    next.push_back(counted);
  }
  return next;
}

void normalize_with_running_statistics(Graph& graph, const std::vector<BatchNormState>& state) {
  for (const BatchNormState& s : state) {
    Node& node = node_reading(graph, s);
    for (size_t i = 1; i < node.outputs.size(); ++i) graph.value_info.erase(node.outputs[i]);
    node.outputs.resize(1);
    node.attrs.erase("training_mode");  // 0 by default; before opset 14, one output means inference
  }
}

std::string normalize_with_running_statistics(const std::string& model_bytes, const std::vector<BatchNormState>& state) {
  onnx::ModelProto mp;
  OT_CHECK(mp.ParseFromString(model_bytes), "the inference model is not a valid ONNX ModelProto");
  std::set<std::string> means;
  for (const BatchNormState& s : state) means.insert(s.running_mean);
  std::set<std::string> dropped;  // the outputs removed, whose value_info goes too
  for (auto& node : *mp.mutable_graph()->mutable_node()) {
    if (!is_onnx_batchnorm(node.domain(), node.op_type()) || node.input_size() < 5 || !means.count(node.input(3)))
      continue;
    auto* attrs = node.mutable_attribute();
    attrs->erase(std::remove_if(attrs->begin(), attrs->end(), [](const onnx::AttributeProto& a) {
                   return a.name() == "training_mode";
                 }), attrs->end());
    for (int i = 1; i < node.output_size(); ++i) dropped.insert(node.output(i));
    node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);
  }
  auto* infos = mp.mutable_graph()->mutable_value_info();
  infos->erase(std::remove_if(infos->begin(), infos->end(),
                              [&](const onnx::ValueInfoProto& vi) { return dropped.count(vi.name()) != 0; }),
               infos->end());
  std::string out;
  OT_CHECK(mp.SerializeToString(&out), "serializing the inference model failed");
  return out;
}

}  // namespace onnxtrain::api
