#include "onnx/model_io.h"
#include "onnx/subgraph_closure.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx-data_pb.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_set>

#include "core/logging.h"
#include "onnx/function_expansion.h"
#include "onnx/proto_convert.h"

namespace onnxtrain {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OT_CHECK(in, "cannot open '", path, "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void fill_model(const Graph& graph, const ModelMeta& meta, onnx::ModelProto& mp) {
  mp.set_ir_version(meta.ir_version);
  mp.set_producer_name(meta.producer_name);
  // Deterministic order keeps saved files comparable.
  std::map<std::string, int> sorted(graph.opsets.begin(), graph.opsets.end());
  for (const auto& kv : sorted) {
    auto* op = mp.add_opset_import();
    op->set_domain(kv.first);
    op->set_version(kv.second);
  }
  save_graph(graph, mp.mutable_graph());
}

}  // namespace

void normalize_graph(Graph& graph) {
  expand_functions(graph);
  close_subgraphs(graph);
}

Graph load_model(const std::string& bytes, ModelMeta* meta) {
  onnx::ModelProto mp;
  OT_CHECK(mp.ParseFromString(bytes), "the bytes are not a valid ONNX ModelProto (", bytes.size(), " bytes)");
  OT_CHECK(mp.has_graph(), "the ONNX model has no graph");
  Graph g;
  g.opsets.clear();
  for (const auto& op : mp.opset_import()) {
    const std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    OT_CHECK(op.version() >= 1 && op.version() <= 10000, "the model imports domain '", domain, "' at version ",
             op.version(), "; opset versions start at 1");
    g.opsets[domain] = static_cast<int>(op.version());
  }
  // A later opset redefines ops (opset 18 moved ReduceMax's axes to an input): read with the
  // latest definitions this build knows, such a model would run with other semantics.
  const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& [domain, version] : g.opsets) {
    auto range = known.find(domain.empty() ? onnx::ONNX_DOMAIN : domain);
    if (range != known.end() && version > range->second.second)
      throw UnsupportedError(str_cat("the model imports opset ", version, " of domain '", domain,
                                     "'; this build of onnxtrain knows its ops up to version ", range->second.second,
                                     ", and later versions change what some mean. "
                                     "Export the model at opset ", range->second.second, " or lower"));
  }
  load_graph(mp.graph(), g);
  // Without an imported version a node has no schema, and nothing could check its inputs.
  for (const Node& n : g.nodes)
    OT_CHECK(g.opsets.count(n.domain), n.describe(), " is in domain '", n.domain,
             "', which the model does not import (opset_import)");
  normalize_graph(g);
  if (meta) {
    meta->ir_version = mp.ir_version();
    meta->producer_name = mp.producer_name();
  }
  return g;
}

Graph load_model_file(const std::string& path, ModelMeta* meta) {
  try {
    return load_model(read_file(path), meta);
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(str_cat("loading '", path, "': ", e.what()));
  } catch (const Error& e) {
    OT_THROW("loading '", path, "': ", e.what());
  }
}

std::string save_model(const Graph& graph, const ModelMeta& meta, bool check) {
  onnx::ModelProto mp;
  fill_model(graph, meta, mp);
  if (check) {
    try {
      onnx::checker::check_model(mp);
    } catch (const std::exception& e) {
      OT_THROW("graph '", graph.name, "' fails onnx::checker: ", e.what());
    }
  }
  std::string out;
  OT_CHECK(mp.SerializeToString(&out), "serializing graph '", graph.name, "' failed");
  return out;
}

void save_model_file(const Graph& graph, const std::string& path, const ModelMeta& meta) {
  std::ofstream out(path, std::ios::binary);
  OT_CHECK(out, "cannot write '", path, "'");
  out << save_model(graph, meta);
}

namespace {
void collect_ops(const onnx::GraphProto& g, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& n : g.node()) {
    std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    if (domain.empty() && is_closed_op_type(n.op_type())) domain = kOnnxTrainDomain;  // as loading leaves it
    out.emplace_back(domain, n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_ops(a.g(), out);
      for (const auto& sub : a.graphs()) collect_ops(sub, out);
    }
  }
}
}  // namespace

std::vector<std::pair<std::string, std::string>> list_model_ops(const std::string& bytes) {
  onnx::ModelProto mp;
  OT_CHECK(mp.ParseFromString(bytes), "the bytes are not a valid ONNX ModelProto (", bytes.size(), " bytes)");
  std::vector<std::pair<std::string, std::string>> out;
  collect_ops(mp.graph(), out);
  return out;
}

namespace {
Tensor sequence_from_proto(const onnx::SequenceProto& p) {
  OT_CHECK(p.elem_type() == onnx::SequenceProto::TENSOR, "sequence '", p.name(),
           "' holds non-tensor elements; onnxtrain's sequences hold tensors");
  std::vector<Tensor> items;
  for (const auto& t : p.tensor_values()) items.push_back(tensor_from_proto(t));
  return Tensor::list(DType::Sequence, std::move(items));
}
}  // namespace

Tensor load_value_proto(const std::string& bytes, DType kind) {
  if (kind == DType::Sequence) {
    onnx::SequenceProto p;
    OT_CHECK(p.ParseFromString(bytes), "the bytes are not a valid ONNX SequenceProto");
    return sequence_from_proto(p);
  }
  if (kind == DType::Optional) {
    onnx::OptionalProto p;
    OT_CHECK(p.ParseFromString(bytes), "the bytes are not a valid ONNX OptionalProto");
    std::vector<Tensor> items;
    if (p.elem_type() == onnx::OptionalProto::TENSOR) items.push_back(tensor_from_proto(p.tensor_value()));
    else if (p.elem_type() == onnx::OptionalProto::SEQUENCE) items.push_back(sequence_from_proto(p.sequence_value()));
    else OT_CHECK(p.elem_type() == onnx::OptionalProto::UNDEFINED, "optional '", p.name(), "' holds an unsupported type");
    return Tensor::list(DType::Optional, std::move(items));
  }
  return load_tensor_proto(bytes);
}

Tensor load_tensor_proto(const std::string& bytes, std::string* name) {
  onnx::TensorProto p;
  OT_CHECK(p.ParseFromString(bytes), "the bytes are not a valid ONNX TensorProto");
  if (name) *name = p.name();
  return tensor_from_proto(p);
}

}  // namespace onnxtrain
