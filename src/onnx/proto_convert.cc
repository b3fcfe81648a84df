#include "onnx/proto_convert.h"

#include <cstring>
#include <unordered_set>

namespace onnxtrain {
namespace {

template <typename Src, typename Dst>
void copy_field(const Src& field, Dst* out, int64_t n) {
  OT_CHECK(static_cast<int64_t>(field.size()) == n, "tensor holds ", field.size(), " values, shape wants ", n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(field.Get(static_cast<int>(i)));
}

// Tensors, sequences of tensors, and optionals of either.
bool holds_tensors(const onnx::TypeProto& t) {
  if (t.has_tensor_type()) return true;
  if (t.has_sequence_type()) return t.sequence_type().elem_type().has_tensor_type();
  if (t.has_optional_type()) return holds_tensors(t.optional_type().elem_type());
  return false;
}

void require_tensor_type(const onnx::ValueInfoProto& vi, const char* what) {
  if (!vi.has_type() || holds_tensors(vi.type())) return;
  throw UnsupportedError(str_cat("graph ", what, " '", vi.name(),
                                 "' is a map, a sparse tensor or a sequence of them; onnxtrain handles tensors, "
                                 "sequences of tensors and optionals of those"));
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p) {
  OT_CHECK(p.data_location() != onnx::TensorProto::EXTERNAL,
           "tensor '", p.name(), "' stores its data externally, which onnxtrain does not load");
  DType dt = dtype_from_onnx(p.data_type());
  TensorShape shape(p.dims().begin(), p.dims().end());
  Tensor t = Tensor::empty(dt, shape);
  int64_t n = shape.numel();
  if (p.has_raw_data()) {
    OT_CHECK(p.raw_data().size() == t.nbytes(), "tensor '", p.name(), "' has ", p.raw_data().size(),
             " bytes of raw data, its shape ", shape.str(), " needs ", t.nbytes());
    if (t.nbytes()) std::memcpy(t.raw_data(), p.raw_data().data(), t.nbytes());
    return t;
  }
  switch (dt) {
    case DType::Float32: copy_field(p.float_data(), t.data<float>(), n); break;
    case DType::Float64: copy_field(p.double_data(), t.data<double>(), n); break;
    case DType::Int64: copy_field(p.int64_data(), t.data<int64_t>(), n); break;
    case DType::UInt64: copy_field(p.uint64_data(), t.data<uint64_t>(), n); break;
    case DType::UInt32: copy_field(p.uint64_data(), t.data<uint32_t>(), n); break;
    case DType::Int32: copy_field(p.int32_data(), t.data<int32_t>(), n); break;
    case DType::Int16: copy_field(p.int32_data(), t.data<int16_t>(), n); break;
    case DType::UInt16: copy_field(p.int32_data(), t.data<uint16_t>(), n); break;
    case DType::Int8: copy_field(p.int32_data(), t.data<int8_t>(), n); break;
    case DType::UInt8: copy_field(p.int32_data(), t.data<uint8_t>(), n); break;
    case DType::Bool: copy_field(p.int32_data(), t.data<bool>(), n); break;
    case DType::Float16:
    case DType::BFloat16: copy_field(p.int32_data(), static_cast<uint16_t*>(t.raw_data()), n); break;
    default: OT_THROW("tensor '", p.name(), "' has unsupported element type ", dtype_name(dt));
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  p->set_raw_data(t.raw_data(), t.nbytes());
}

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& p) {
  ValueInfo vi;
  if (p.type().has_sequence_type()) vi.dtype = DType::Sequence;
  if (p.type().has_optional_type()) vi.dtype = DType::Optional;
  if (!p.type().has_tensor_type()) return vi;  // callers reject the types we cannot hold
  const auto& tt = p.type().tensor_type();
  if (tt.elem_type() != 0) {
    // Types we cannot hold (strings) stay undefined here; the op that needs them reports it.
    try { vi.dtype = dtype_from_onnx(tt.elem_type()); } catch (const Error&) {}
  }
  if (tt.has_shape()) {
    std::vector<Dim> dims;
    for (const auto& d : tt.shape().dim())
      dims.push_back(d.has_dim_value() ? Dim{d.dim_value(), ""} : Dim{-1, d.dim_param()});
    vi.shape = dims;
  }
  return vi;
}

void value_info_to_proto(const std::string& name, const ValueInfo* vi, onnx::ValueInfoProto* p) {
  p->set_name(name);
  if (vi && is_list_kind(vi->dtype)) {  // element types are not tracked: declared as unknown
    onnx::TypeProto* elem = vi->dtype == DType::Sequence
                                ? p->mutable_type()->mutable_sequence_type()->mutable_elem_type()
                                : p->mutable_type()->mutable_optional_type()->mutable_elem_type();
    elem->mutable_tensor_type()->set_elem_type(0);
    return;
  }
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(vi ? static_cast<int32_t>(vi->dtype) : 0);
  if (vi && vi->shape) {
    auto* shape = tt->mutable_shape();
    for (const Dim& d : *vi->shape) {
      auto* dim = shape->add_dim();
      if (d.is_static()) dim->set_dim_value(d.value);
      else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
    }
  }
}

Attribute attribute_from_proto(const onnx::AttributeProto& a) {
  Attribute out;
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT: out = Attribute::of_float(a.f()); break;
    case onnx::AttributeProto::INT: out = Attribute::of_int(a.i()); break;
    case onnx::AttributeProto::STRING: out = Attribute::of_string(a.s()); break;
    case onnx::AttributeProto::TENSOR: out = Attribute::of_tensor(tensor_from_proto(a.t())); break;
    case onnx::AttributeProto::FLOATS: out = Attribute::of_floats({a.floats().begin(), a.floats().end()}); break;
    case onnx::AttributeProto::INTS: out = Attribute::of_ints({a.ints().begin(), a.ints().end()}); break;
    case onnx::AttributeProto::STRINGS:
      out.kind = Attribute::Kind::Strings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::TYPE_PROTO:
      out.kind = Attribute::Kind::TypeProto;
      out.s = a.tp().SerializeAsString();
      break;
    case onnx::AttributeProto::GRAPH:
      out.kind = Attribute::Kind::Graph;
      out.g = std::make_shared<Graph>();
      load_graph(a.g(), *out.g);
      break;
    default:
      throw UnsupportedError(str_cat("attribute '", a.name(), "' has kind ",
                                     onnx::AttributeProto::AttributeType_Name(a.type()),
                                     ", which onnxtrain does not support"));
  }
  return out;
}

void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Float: p->set_type(onnx::AttributeProto::FLOAT); p->set_f(a.f); break;
    case Attribute::Kind::Int: p->set_type(onnx::AttributeProto::INT); p->set_i(a.i); break;
    case Attribute::Kind::String: p->set_type(onnx::AttributeProto::STRING); p->set_s(a.s); break;
    case Attribute::Kind::Tensor:
      p->set_type(onnx::AttributeProto::TENSOR);
      tensor_to_proto(a.t, "", p->mutable_t());
      break;
    case Attribute::Kind::Graph:
      p->set_type(onnx::AttributeProto::GRAPH);
      save_graph(*a.g, p->mutable_g());
      break;
    case Attribute::Kind::TypeProto:
      p->set_type(onnx::AttributeProto::TYPE_PROTO);
      OT_CHECK(p->mutable_tp()->ParseFromString(a.s), "attribute '", name, "' holds no valid TypeProto");
      break;
    case Attribute::Kind::Floats:
      p->set_type(onnx::AttributeProto::FLOATS);
      for (float v : a.floats) p->add_floats(v);
      break;
    case Attribute::Kind::Ints:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    case Attribute::Kind::Strings:
      p->set_type(onnx::AttributeProto::STRINGS);
      for (const auto& v : a.strings) p->add_strings(v);
      break;
  }
}

void load_graph(const onnx::GraphProto& gp, Graph& g) {
  g.name = gp.name().empty() ? "graph" : gp.name();
  for (const auto& vi : gp.input()) require_tensor_type(vi, "input");
  for (const auto& vi : gp.output()) require_tensor_type(vi, "output");
  for (const auto& t : gp.initializer()) {
    OT_CHECK(!t.name().empty(), "graph '", g.name, "' has an initializer without a name");
    g.add_initializer(t.name(), tensor_from_proto(t));
  }
  for (const auto& vi : gp.input()) {
    OT_CHECK(!vi.name().empty(), "graph '", g.name, "' has an input without a name");
    // Initializers listed as inputs (keep_initializers_as_inputs) stay inputs: callers may feed them.
    g.inputs.push_back(vi.name());
    ValueInfo info = value_info_from_proto(vi);
    if (!g.is_initializer(vi.name()) || info.dtype != DType::Undefined) g.value_info[vi.name()] = info;
  }
  for (const auto& vi : gp.value_info()) g.value_info[vi.name()] = value_info_from_proto(vi);
  for (const auto& vi : gp.output()) {
    OT_CHECK(!vi.name().empty(), "graph '", g.name, "' has an output without a name");
    g.outputs.push_back(vi.name());
    g.value_info[vi.name()] = value_info_from_proto(vi);
  }
  for (const auto& np : gp.node()) {
    Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    OT_CHECK(!n.op_type.empty(), "graph '", g.name, "' has a node without an op_type (node '", n.name, "')");
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      try {
        n.attrs[a.name()] = attribute_from_proto(a);
      } catch (const UnsupportedError& e) {
        throw UnsupportedError(str_cat(n.describe(), ": ", e.what()));
      } catch (const Error& e) {
        OT_THROW(n.describe(), ": ", e.what());
      }
    }
    g.nodes.push_back(std::move(n));
  }
}

void node_to_proto(const Node& n, onnx::NodeProto* np) {
  np->set_name(n.name);
  np->set_op_type(n.op_type);
  np->set_domain(n.domain);
  for (const auto& v : n.inputs) np->add_input(v);
  for (const auto& v : n.outputs) np->add_output(v);
  for (const auto& kv : n.attrs) attribute_to_proto(kv.first, kv.second, np->add_attribute());
}

void save_graph(const Graph& g, onnx::GraphProto* gp) {
  gp->set_name(g.name);
  for (const auto& name : g.initializer_order) tensor_to_proto(g.initializers.at(name), name, gp->add_initializer());
  for (const auto& v : g.inputs) value_info_to_proto(v, g.info(v), gp->add_input());
  for (const auto& v : g.outputs) value_info_to_proto(v, g.info(v), gp->add_output());
  std::unordered_set<std::string> listed(g.inputs.begin(), g.inputs.end());
  listed.insert(g.outputs.begin(), g.outputs.end());
  for (const auto& n : g.nodes) {
    node_to_proto(n, gp->add_node());
    for (const auto& v : n.outputs) {
      const ValueInfo* vi = g.info(v);
      if (!v.empty() && vi && vi->dtype != DType::Undefined && !listed.count(v))
        value_info_to_proto(v, vi, gp->add_value_info());
    }
  }
}

}  // namespace onnxtrain
