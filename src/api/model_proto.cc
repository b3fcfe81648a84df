// The API's two operations on ModelProto bytes themselves rather than on the engine's IR: checking
// a model as onnx.checker does, and exporting the user's own model file with new weights. Working
// on the protobuf keeps everything the IR does not model (metadata, doc strings, functions,
// value_info) exactly as the user's exporter wrote it.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <unordered_set>

#include "api/internal.h"
#include "core/error.h"
#include "onnx/proto_convert.h"

namespace onnxtrain::api {

void check_model_bytes(const std::string& model_bytes, const std::string& what) {
  onnx::ModelProto mp;
  OT_CHECK(mp.ParseFromString(model_bytes), what, " is not a valid ONNX ModelProto");
  // Said before the checker's own words ("ir_version is higher than the checker's"), which name
  // neither version nor the way out.
  OT_CHECK(mp.ir_version() <= onnx::IR_VERSION, what, " has ONNX IR version ", mp.ir_version(), ", newer than the ",
           onnx::IR_VERSION, " this build of onnxtrain reads (torch.onnx.export's dynamo exporter, the default since "
           "torch 2.9, writes IR version 10 and opset 18); export it with torch.onnx.export(..., dynamo=False, "
           "opset_version=17)");
  try {
    onnx::checker::check_model(mp);
  } catch (const std::exception& e) {
    OT_THROW(what, " fails onnx.checker: ", e.what());
  }
}

std::string replace_initializers(const std::string& model_bytes, const std::map<std::string, Tensor>& values) {
  onnx::ModelProto mp;
  OT_CHECK(mp.ParseFromString(model_bytes), "the inference model is not a valid ONNX ModelProto");
  std::unordered_set<std::string> replaced;
  for (auto& init : *mp.mutable_graph()->mutable_initializer()) {
    auto it = values.find(init.name());
    if (it == values.end()) continue;
    const Tensor& value = it->second;
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    OT_CHECK(TensorShape(dims) == value.shape(), "parameter '", init.name(), "' has shape ", value.shape().str(),
             " in the checkpoint but ", TensorShape(dims).str(), " in the inference model");
    const std::string name = init.name(), doc = init.doc_string();
    init.Clear();  // drops float_data and the dims, which tensor_to_proto would append to
    tensor_to_proto(value, name, &init);
    if (!doc.empty()) init.set_doc_string(doc);
    replaced.insert(name);
  }
  for (const auto& kv : values)
    OT_CHECK(replaced.count(kv.first), "parameter '", kv.first, "' is not an initializer of the inference model");
  std::string out;
  OT_CHECK(mp.SerializeToString(&out), "serializing the inference model failed");
  check_model_bytes(out, "the exported inference model");
  return out;
}

}  // namespace onnxtrain::api
