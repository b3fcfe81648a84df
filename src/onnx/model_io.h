#pragma once
// Conversion between ONNX ModelProto bytes and onnxtrain's Graph. Only this folder includes the
// protobuf headers, which keeps the rest of the build light.
#include <string>

#include "ir/graph.h"

namespace onnxtrain {

struct ModelMeta {
  int64_t ir_version = 8;
  std::string producer_name = "onnxtrain";
};

// Parses serialized ModelProto bytes. Throws an Error naming what is malformed.
Graph load_model(const std::string& bytes, ModelMeta* meta = nullptr);
Graph load_model_file(const std::string& path, ModelMeta* meta = nullptr);

// What loading normalizes, for graphs built in code as for loaded ones: function bodies expanded
// (function_expansion.h), control-flow bodies closed over the outer values they read
// (subgraph_closure.h). The first step of session/graph_preparation.h; idempotent.
void normalize_graph(Graph& graph);

// Serializes a graph as a ModelProto; `check` runs onnx::checker on the result.
std::string save_model(const Graph& graph, const ModelMeta& meta = {}, bool check = false);
void save_model_file(const Graph& graph, const std::string& path, const ModelMeta& meta = {});

// (domain, op_type) of every node in the model, subgraphs included, read straight from the
// protobuf: works for models the IR cannot hold. Ops with bodies (If, Loop, ...) are listed in
// the closed form loading gives them (onnx/subgraph_closure.h), domain ai.onnxtrain.
std::vector<std::pair<std::string, std::string>> list_model_ops(const std::string& bytes);

// Reads a serialized TensorProto (the .pb files of ONNX's node tests).
Tensor load_tensor_proto(const std::string& bytes, std::string* name = nullptr);
// A serialized SequenceProto or OptionalProto as Tensor::list of `kind`; a TensorProto for any
// other kind.
Tensor load_value_proto(const std::string& bytes, DType kind);

}  // namespace onnxtrain
