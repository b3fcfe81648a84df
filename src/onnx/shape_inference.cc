#include "onnx/shape_inference.h"

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <deque>
#include <unordered_map>

#include "core/logging.h"
#include "onnx/proto_convert.h"

namespace onnxtrain {
namespace {

// Tensors small enough to be shape data (Reshape's target, Slice's starts): inference reads
// their values. Larger initializers only contribute their type.
constexpr int64_t kMaxDataElements = 4096;

class NodeByNodeInference {
 public:
  explicit NodeByNodeInference(Graph& graph) : graph_(graph) {
    for (const auto& [name, info] : graph.value_info) declare(name, &info);
    for (const auto& name : graph.initializer_order) {
      const Tensor& t = graph.initializers.at(name);
      if (!types_.count(name)) {
        ValueInfo info{t.dtype(), std::vector<Dim>()};
        for (int64_t d : t.shape()) info.shape->push_back(Dim{d, ""});
        declare(name, &info);
      }
      if (t.numel() <= kMaxDataElements) add_data(name, t);
    }
  }

  void run() {
    for (const Node& n : graph_.nodes) infer(n);
  }

 private:
  void declare(const std::string& name, const ValueInfo* info) {
    // Sequences and optionals stay undeclared: the ops that read them infer nothing we use.
    if (name.empty() || !info || info->dtype == DType::Undefined || is_list_kind(info->dtype)) return;
    onnx::ValueInfoProto vi;
    value_info_to_proto(name, info, &vi);
    types_[name] = vi.type();
    pointers_[name] = &types_[name];
  }

  void add_data(const std::string& name, const Tensor& t) {
    data_store_.emplace_back();
    tensor_to_proto(t, name, &data_store_.back());
    data_[name] = &data_store_.back();
  }

  // The rank of a value, if inference or a declaration fixed it; -1 otherwise.
  int rank_of(const Node& n, size_t input) const {
    if (input >= n.inputs.size() || n.inputs[input].empty()) return -1;
    auto it = types_.find(n.inputs[input]);
    if (it == types_.end() || !it->second.has_tensor_type() || !it->second.tensor_type().has_shape()) return -1;
    return it->second.tensor_type().shape().dim_size();
  }

  [[noreturn]] void refuse(const Node& n, size_t input, const std::string& why) const {
    OT_THROW(n.describe(), ": input ", input, " '", n.inputs[input], "' ", why);
  }

  // Ops whose output size libonnx computes from strides, dilations and a kernel: it divides by
  // the strides (a fuzzer crash: AveragePool with a zero stride), and the kernels need all three
  // positive anyway.
  static bool is_windowed(const std::string& op) {
    return op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv" ||
           op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "MaxUnpool";
  }

  // The input holding a convolution's weight; -1 for an op that is not a convolution.
  static int conv_weight_input(const std::string& op) {
    if (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger") return 1;
    if (op == "QLinearConv") return 3;  // x, x_scale, x_zero_point, w, ...
    return -1;
  }

  static void refuse_nonpositive_window(const Node& n) {
    for (const char* name : {"strides", "dilations", "kernel_shape"}) {
      if (!n.has_attr(name)) continue;
      for (int64_t v : n.attr_ints(name))
        if (v <= 0) OT_THROW(n.describe(), ": attribute ", name, " has the value ", v, "; every entry must be positive");
    }
    if (n.has_attr("group") && n.attr_int("group", 1) <= 0)
      OT_THROW(n.describe(), ": attribute group is ", n.attr_int("group", 1), "; it must be positive");
  }

  // Ranks that libonnx 1.12's inference functions assume without checking. Each guard names a
  // crash seen (issue 11, the fuzzer); the kernels check the same conditions at run time.
  void guard(const Node& n) const {
    const std::string& op = n.op_type;
    if (!n.domain.empty()) return;
    if (is_windowed(op)) refuse_nonpositive_window(n);
    if (const int weight = conv_weight_input(op); weight >= 0) {
      // libonnx reads the kernel shape off the weight and indexes the per-axis attributes with
      // it (a fuzzer crash: ConvInteger with X of rank 3 and W of rank 4).
      const int x = rank_of(n, 0), w = rank_of(n, static_cast<size_t>(weight));
      if (x >= 0 && x < 3) refuse(n, 0, str_cat("has rank ", x, "; ", op, " needs [N, C, spatial...] (rank >= 3)"));
      const auto w_input = static_cast<size_t>(weight);
      if (w >= 0 && w < 3) refuse(n, w_input, str_cat("has rank ", w, "; ", op, " needs a weight of rank >= 3"));
      if (x >= 0 && w >= 0 && x != w)
        refuse(n, w_input, str_cat("has rank ", w, " but X has rank ", x, "; they must match"));
    } else if (op == "DepthToSpace" || op == "SpaceToDepth") {
      // libonnx divides the channels (or the spatial dims) by the block size.
      const int64_t block = n.attr_int("blocksize", 0);
      if (block <= 0) OT_THROW(n.describe(), ": blocksize is ", block, "; it must be positive");
    } else if (op == "MaxUnpool") {
      // libonnx 1.12 reads the indices' dim 1 unchecked (a fuzzer crash: indices of rank 1); the
      // kernel needs indices shaped as X anyway.
      const int x = rank_of(n, 0), indices = rank_of(n, 1);
      if (x >= 0 && indices >= 0 && x != indices)
        refuse(n, 1, str_cat("has rank ", indices, " but X has rank ", x, "; MaxUnpool's indices have X's shape"));
    } else if (op == "STFT") {
      // libonnx 1.12 reads the signal's dim 1 unchecked (a fuzzer crash: a signal of rank 1).
      const int x = rank_of(n, 0);
      if (x >= 0 && x != 3) refuse(n, 0, str_cat("has rank ", x, "; STFT needs [batch, signal_length, 1 or 2]"));
    } else if (op == "LayerNormalization") {
      const int x = rank_of(n, 0);
      if (x == 0) refuse(n, 0, "is a scalar; LayerNormalization needs rank >= 1");
      const int64_t axis = n.attr_int("axis", -1);
      if (x > 0 && (axis < -x || axis >= x)) refuse(n, 0, str_cat("has rank ", x, ", out of range for axis ", axis));
    }
  }

  void check_arity(const Node& n, const onnx::OpSchema& schema) const {
    const int inputs = static_cast<int>(n.inputs.size()), outputs = static_cast<int>(n.outputs.size());
    OT_CHECK(inputs >= schema.min_input() && inputs <= schema.max_input(), n.describe(), " has ", inputs,
             " inputs; ", n.op_type, "-", schema.SinceVersion(), " takes ", schema.min_input(), " to ",
             schema.max_input());
    OT_CHECK(outputs >= schema.min_output() && outputs <= schema.max_output(), n.describe(), " has ", outputs,
             " outputs; ", n.op_type, "-", schema.SinceVersion(), " gives ", schema.min_output(), " to ",
             schema.max_output());
    for (int i = 0; i < schema.min_input() && i < inputs; ++i) {
      const auto& formal = schema.inputs()[static_cast<size_t>(std::min<int>(i, static_cast<int>(schema.inputs().size()) - 1))];
      OT_CHECK(!n.inputs[static_cast<size_t>(i)].empty() || formal.GetOption() == onnx::OpSchema::Optional,
               n.describe(), ": required input ", i, " ('", formal.GetName(), "') is missing");
    }
  }

  // An op without an inference function (in libonnx 1.12 LessOrEqual and GreaterOrEqual, which a
  // function body defines) still fixes an output's element type where its type constraint allows
  // one type, bool for a comparison: without it every node downstream (HF's causal masks) stayed
  // untyped, and a gradient rule there could not be built.
  void declare_single_typed_outputs(const Node& n, const onnx::OpSchema& schema) {
    const auto& formals = schema.outputs();
    if (formals.empty()) return;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const auto& allowed = formals[std::min(i, formals.size() - 1)].GetTypes();
      if (n.outputs[i].empty() || allowed.size() != 1 || pointers_.count(n.outputs[i])) continue;
      onnx::ValueInfoProto vi;
      *vi.mutable_type() = onnx::Utils::DataTypeUtils::ToTypeProto(*allowed.begin());
      ValueInfo& existing = graph_.value_info[n.outputs[i]];
      if (existing.dtype == DType::Undefined) existing.dtype = value_info_from_proto(vi).dtype;
      declare(n.outputs[i], &existing);
    }
  }

  void infer(const Node& n) {
    auto opset = graph_.opsets.find(n.domain);
    if (opset == graph_.opsets.end()) return;
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type, opset->second, n.domain);
    if (!schema) {
      // Defined only from a later opset: a model ONNX's checker refuses, and whose inputs nothing
      // could check. An op no version defines is left to the kernel lookup, which names it.
      const onnx::OpSchema* later = onnx::OpSchemaRegistry::Schema(n.op_type, 1 << 20, n.domain);
      OT_CHECK(!later, n.describe(), " is not defined at version ", opset->second, " of domain '", n.domain,
               "' that the model imports (its latest definition is from version ", later ? later->SinceVersion() : 0,
               ")");
      return;
    }
    check_arity(n, *schema);
    guard(n);
    if (n.op_type == "Constant" && n.domain.empty() && n.has_attr("value") && n.outputs.size() == 1) {
      const Attribute& value = n.attrs.at("value");
      if (value.kind == Attribute::Kind::Tensor && value.t.numel() <= kMaxDataElements) add_data(n.outputs[0], value.t);
    }
    if (!schema->has_type_and_shape_inference_function()) {
      declare_single_typed_outputs(n, *schema);
      return;
    }
    // Subgraph ops (If, Loop, Scan) infer through a graph inferencer that a node-by-node context
    // does not have; libonnx dereferences it unchecked. Their outputs stay as declared.
    for (const auto& [name, attr] : n.attrs)
      if (attr.kind == Attribute::Kind::Graph) return;
    // Many inference functions read an input's type without checking that it is known.
    for (const std::string& input : n.inputs)
      if (!input.empty() && !pointers_.count(input)) return;
    // libonnx 1.12's MaxUnpool inference reads the indices' shape unchecked (a fuzzer crash: indices
    // typed but without a shape): it runs only when every input's rank is known.
    if (n.domain.empty() && n.op_type == "MaxUnpool")
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (!n.inputs[i].empty() && rank_of(n, i) < 0) return;
    onnx::NodeProto proto;
    node_to_proto(n, &proto);
    onnx::shape_inference::InferenceContextImpl ctx(proto, pointers_, data_, no_sparse_data_);
    try {
      schema->GetTypeAndShapeInferenceFunction()(ctx);
    } catch (const std::exception& e) {
      log(LogLevel::Verbose, "ONNX shape inference skipped ", n.describe(), ": ", e.what());
      return;
    }
    for (size_t i = 0; i < n.outputs.size() && i < ctx.allOutputTypes_.size(); ++i) {
      const std::string& out = n.outputs[i];
      const onnx::TypeProto& inferred = ctx.allOutputTypes_[i];
      if (out.empty() || !inferred.has_tensor_type() || inferred.tensor_type().elem_type() == 0) continue;
      onnx::ValueInfoProto vi;
      *vi.mutable_type() = inferred;
      ValueInfo merged = value_info_from_proto(vi);
      ValueInfo& existing = graph_.value_info[out];
      if (existing.dtype == DType::Undefined) existing.dtype = merged.dtype;
      if (!existing.shape) existing.shape = merged.shape;
      // Later nodes see the declaration refined by what inference found (a dim the exporter left
      // symbolic but the weights fix), as ONNX's whole-graph inference would give them.
      ValueInfo refined = existing;
      if (merged.shape && refined.shape && merged.shape->size() == refined.shape->size())
        for (size_t d = 0; d < refined.shape->size(); ++d)
          if ((*refined.shape)[d].value < 0 && (*merged.shape)[d].value >= 0) (*refined.shape)[d] = (*merged.shape)[d];
      declare(out, &refined);
    }
  }

  Graph& graph_;
  std::unordered_map<std::string, onnx::TypeProto> types_;
  std::unordered_map<std::string, onnx::TypeProto*> pointers_;
  std::deque<onnx::TensorProto> data_store_;
  std::unordered_map<std::string, const onnx::TensorProto*> data_;
  const std::unordered_map<std::string, const onnx::SparseTensorProto*> no_sparse_data_;
};

}  // namespace

void infer_shapes(Graph& graph) { NodeByNodeInference(graph).run(); }

}  // namespace onnxtrain
