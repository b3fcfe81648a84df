#include "session/input_check.h"

namespace onnxtrain {

namespace {
std::string declared_shape(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += i ? "x" : "";
    s += dims[i].is_static() ? std::to_string(dims[i].value) : (dims[i].symbol.empty() ? "?" : dims[i].symbol);
  }
  return s + "]";
}
}  // namespace

void check_inputs(const Graph& graph, const std::vector<std::string>& names, const std::vector<Tensor>& inputs) {
  OT_CHECK(inputs.size() == names.size(), "graph '", graph.name, "' takes ", names.size(), " inputs, got ",
           inputs.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& t = inputs[i];
    OT_CHECK(t.defined(), "input '", names[i], "' of graph '", graph.name, "' has no value");
    const ValueInfo* vi = graph.info(names[i]);
    if (!vi) continue;
    OT_CHECK(vi->dtype == DType::Undefined || vi->dtype == t.dtype(), "input '", names[i], "' must be ",
             dtype_name(vi->dtype), ", got ", t.str());
    if (!vi->shape) continue;
    const auto& dims = *vi->shape;
    bool ok = static_cast<int>(dims.size()) == t.rank();
    for (size_t d = 0; ok && d < dims.size(); ++d) ok = !dims[d].is_static() || dims[d].value == t.dim(static_cast<int>(d));
    OT_CHECK(ok, "input '", names[i], "' must have shape ", declared_shape(dims), ", got ", t.str());
  }
}

}  // namespace onnxtrain
