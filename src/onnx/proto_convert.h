#pragma once
// Conversions between onnxtrain's IR and ONNX's protobuf classes, for the loader, the saver and
// shape inference. Only src/onnx/ includes the protobuf headers.
#include <onnx/onnx_pb.h>

#include <string>

#include "ir/graph.h"

namespace onnxtrain {

Tensor tensor_from_proto(const onnx::TensorProto& p);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);
ValueInfo value_info_from_proto(const onnx::ValueInfoProto& p);
void value_info_to_proto(const std::string& name, const ValueInfo* vi, onnx::ValueInfoProto* p);
Attribute attribute_from_proto(const onnx::AttributeProto& a);
void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p);
void node_to_proto(const Node& n, onnx::NodeProto* p);
// Whole graphs (also the bodies of graph attributes).
void load_graph(const onnx::GraphProto& gp, Graph& g);
void save_graph(const Graph& g, onnx::GraphProto* gp);

}  // namespace onnxtrain
