// ai.onnxtrain::SplitGuard: X passes through unchanged, after a check that torch's chunk, split or
// unbind of X would make the pieces the exported graph has outputs for. The export fixes the number
// of pieces (and for split and unbind their sizes, which torch 1.13 writes as constants), while in
// eager both follow the size at run time: 16 rows chunk into 6, 6 and 4, and 4 rows into two
// pieces. A graph that no longer fits raises ExportMismatchError, and the front end
// (onnxtrain/_split_guards.py) exports the module again for the new inputs; never fewer or more
// outputs than eager returns.
#include <algorithm>
#include <sstream>

#include "autodiff/grad_builder.h"
#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"

namespace onnxtrain {
namespace {

// How torch's chunk, split and unbind cut a dim of `size`, as ATen does: `count` pieces of `piece`
// elements, the last one holding the rest. An empty dim chunks into `parameter` empty pieces.
struct TorchCut {
  int64_t count = 0, piece = 0, size = 0;

  // The piece sizes; only called once `count` is known to equal an attribute's length.
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> out(static_cast<size_t>(count), piece);
    if (count > 0) out.back() = size - piece * (count - 1);
    return out;
  }
};

TorchCut torch_cut(const std::string& kind, int64_t size, int64_t parameter) {
  if (kind == "unbind") return {size, 1, size};
  if (kind == "chunk") {
    const int64_t piece = size / parameter + (size % parameter != 0);  // ceil, without overflow
    if (piece == 0) return {parameter, 0, 0};
    return {size / piece + (size % piece != 0), piece, size};
  }
  if (parameter == 0) return {1, size, size};  // split_size 0: torch allows it on an empty dim only
  return {std::max<int64_t>(size / parameter + (size % parameter != 0), 1), parameter, size};
}

std::string list(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

class SplitGuardKernel final : public Kernel {
 public:
  explicit SplitGuardKernel(const KernelInfo& info)
      : kind_(info.node.attr_string("kind", "")),
        axis_(info.node.attr_int("axis", 0)),
        parameter_(info.node.attr_int("parameter", 1)),
        exported_(info.node.attr_ints("pieces")) {
    OT_CHECK(kind_ == "chunk" || kind_ == "split" || kind_ == "unbind", "kind is '", kind_,
             "'; expected chunk, split or unbind");
    OT_CHECK(kind_ == "unbind" || parameter_ > 0 || (kind_ == "split" && parameter_ == 0), "parameter is ",
             parameter_, "; chunk takes a positive count, split a non-negative size");
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(axis_ >= 0 && axis_ < x.rank(), "axis ", axis_, " is out of range for the input ", x.str());
    const int64_t size = x.dim(static_cast<int>(axis_));
    const TorchCut cut = torch_cut(kind_, size, parameter_);
    // chunk exports its slices from the size at run time, so only their number is fixed; split and
    // unbind export constant sizes.
    const bool same_count = cut.count == static_cast<int64_t>(exported_.size());
    if (!same_count || (kind_ != "chunk" && cut.sizes() != exported_)) {
      throw ExportMismatchError(str_cat(
          "the graph was exported for ", describe_call(), " giving ", exported_.size(), " pieces ", list(exported_),
          ", but this input's dim ", axis_, " of size ", size, " gives ", cut.count, " pieces",
          same_count ? " " + list(cut.sizes()) : std::string(),
          "; the module has to be exported again for this input"));
    }
    ctx.alias_input(0, 0, x.shape());
  }

 private:
  std::string describe_call() const {
    if (kind_ == "unbind") return str_cat("unbind(dim=", axis_, ")");
    return str_cat(kind_, "(", parameter_, ", dim=", axis_, ")");
  }

  std::string kind_;
  int64_t axis_;
  int64_t parameter_;
  std::vector<int64_t> exported_;
};

void split_guard_gradient(GradBuilder& g) { g.set_input_grad(0, g.output_grad(0)); }

onnx::OpSchema split_guard_schema() {
  onnx::OpSchema schema;
  schema.SetName("SplitGuard")
      .SetDomain(kOnnxTrainDomain)
      .SinceVersion(1)
      .SetDoc("Y = X, after checking that torch's chunk, split or unbind of X gives the exported pieces.")
      .Attr("kind", "chunk, split or unbind", onnx::AttributeProto::STRING)
      .Attr("axis", "the dim that is cut (non-negative)", onnx::AttributeProto::INT)
      .Attr("parameter", "chunk's number of chunks, split's split_size; unused for unbind", onnx::AttributeProto::INT,
            static_cast<int64_t>(1))
      .Attr("pieces", "the sizes of the pieces the graph was exported for", onnx::AttributeProto::INTS)
      .Input(0, "X", "the tensor about to be cut", "T")
      .Output(0, "Y", "X itself", "T")
      .TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "any tensor type")
      .TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(split_guard_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SplitGuard", kernel_factory<SplitGuardKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "SplitGuard", kBothHalfFloats);
ONNXTRAIN_GRADIENT(kOnnxTrainDomain, "SplitGuard", split_guard_gradient);

}  // namespace onnxtrain
