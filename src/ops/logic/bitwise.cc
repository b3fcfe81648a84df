// Integer bit operations with PyTorch's semantics, for every integer type (and bool, where
// and/or/xor/not are the logical ones): BitwiseAnd/Or/Xor/Not (ONNX added them at opset 18;
// torch 1.13 exports none of them, so the front end writes them in onnxtrain's domain at opset 17,
// and the standard names run the same kernels), BitShift on signed integers too (PyTorch's <<
// and >>: the right shift is arithmetic; ONNX's BitShift is unsigned only), and FloorDiv (// on
// integers rounds toward minus infinity; ONNX's integer Div truncates). All broadcast; all are
// forward only: integer outputs carry no gradient.
#include <limits>
#include <type_traits>

#include "onnx/custom_schema.h"
#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/common/shift_direction.h"

namespace onnxtrain {
namespace {

template <typename Op>
void integer_binary(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  OT_CHECK(a.dtype() == b.dtype(), Op::kName, ": inputs have different element types: ", a.str(), " and ", b.str());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T>(ctx, [](T x, T y) { return Op::apply(x, y); });
  };
  if constexpr (Op::kTakesBool) dispatch_integer_or_bool(a.dtype(), Op::kName, run);
  else dispatch_integer(a.dtype(), Op::kName, run);
}

struct BitAnd {
  static constexpr const char* kName = "BitwiseAnd";
  static constexpr bool kTakesBool = true;
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a & b); }
};
struct BitOr {
  static constexpr const char* kName = "BitwiseOr";
  static constexpr bool kTakesBool = true;
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a | b); }
};
struct BitXor {
  static constexpr const char* kName = "BitwiseXor";
  static constexpr bool kTakesBool = true;
  template <typename T> static T apply(T a, T b) { return static_cast<T>(a ^ b); }
};

// Floor division; INT_MIN // -1 wraps to INT_MIN as in PyTorch (C++ would trap).
struct FloorDiv {
  static constexpr const char* kName = "FloorDiv";
  static constexpr bool kTakesBool = false;
  template <typename T> static T apply(T a, T b) {
    OT_CHECK(b != 0, "FloorDiv: integer division by zero");
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
      const T q = static_cast<T>(a / b);
      return (a % b != 0 && ((a < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
    } else {
      return static_cast<T>(a / b);
    }
  }
};

void bitwise_not(KernelContext& ctx) {
  dispatch_integer_or_bool(ctx.input(0).dtype(), "BitwiseNot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) unary_kernel<T>(ctx, [](bool v) { return !v; });
    else unary_kernel<T>(ctx, [](T v) { return static_cast<T>(~v); });
  });
}

template <typename T> bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>) return v < 0;
  else return false;
}

// PyTorch's shifts: amounts of the width or more (and negative ones) shift every bit out, to 0
// on the left and to the sign on the right.
class ShiftKernel final : public Kernel {
 public:
  explicit ShiftKernel(const KernelInfo& info) : left_(shifts_left(info.node)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& s = ctx.input(1);
    OT_CHECK(x.dtype() == s.dtype(), "BitShift: inputs have different element types: ", x.str(), " and ", s.str());
    const bool left = left_;
    dispatch_integer(x.dtype(), "BitShift", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using U = std::make_unsigned_t<T>;
      constexpr int kBits = static_cast<int>(sizeof(T) * 8);
      binary_kernel<T>(ctx, [left](T v, T n) {
        const bool out_of_range = is_negative(n) || static_cast<uint64_t>(n) >= static_cast<uint64_t>(kBits);
        if (left) return out_of_range ? T(0) : static_cast<T>(static_cast<U>(static_cast<U>(v) << n));
        if (out_of_range) return is_negative(v) ? static_cast<T>(-1) : T(0);
        return static_cast<T>(v >> n);  // arithmetic for signed T (C++20, and every compiler before)
      });
    });
  }

 private:
  bool left_ = true;
};

void broadcast_inference(onnx::InferenceContext& ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (onnx::hasNInputShapes(ctx, 2))
    onnx::bidirectionalBroadcastShapeInference(ctx.getInputType(0)->tensor_type().shape(),
                                               ctx.getInputType(1)->tensor_type().shape(),
                                               *ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape());
}

const std::vector<std::string> kIntegerTypes = {"tensor(int8)",  "tensor(int16)",  "tensor(int32)",  "tensor(int64)",
                                                "tensor(uint8)", "tensor(uint16)", "tensor(uint32)", "tensor(uint64)"};

onnx::OpSchema integer_schema(const char* name, const char* doc, bool binary, bool takes_bool) {
  std::vector<std::string> types = kIntegerTypes;
  if (takes_bool) types.push_back("tensor(bool)");
  onnx::OpSchema schema;
  schema.SetName(name).SetDomain(kOnnxTrainDomain).SinceVersion(1).SetDoc(doc);
  schema.Input(0, "A", "first operand", "T", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable);
  if (binary)
    schema.Input(1, "B", "second operand", "T", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable);
  schema.Output(0, "C", "result", "T", onnx::OpSchema::Single, true, 1, onnx::OpSchema::NonDifferentiable)
      .TypeConstraint("T", types, "integer types")
      .TypeAndShapeInferenceFunction(binary ? broadcast_inference : onnx::propagateShapeAndTypeFromFirstInput);
  return schema;
}

onnx::OpSchema shift_schema() {
  onnx::OpSchema schema = integer_schema("BitShift", "PyTorch's << and >> on any integer type.", true, false);
  schema.Attr("direction", "LEFT or RIGHT", onnx::AttributeProto::STRING);
  return schema;
}

}  // namespace

ONNXTRAIN_SCHEMA(integer_schema("BitwiseAnd", "torch.bitwise_and (&).", true, true));
ONNXTRAIN_SCHEMA(integer_schema("BitwiseOr", "torch.bitwise_or (|).", true, true));
ONNXTRAIN_SCHEMA(integer_schema("BitwiseXor", "torch.bitwise_xor (^).", true, true));
ONNXTRAIN_SCHEMA(integer_schema("BitwiseNot", "torch.bitwise_not (~).", false, true));
ONNXTRAIN_SCHEMA(integer_schema("FloorDiv", "// and torch.div(rounding_mode='floor') on integers.", true, false));
ONNXTRAIN_SCHEMA(shift_schema());
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BitwiseAnd", kernel_factory(&integer_binary<BitAnd>),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BitwiseOr", kernel_factory(&integer_binary<BitOr>),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BitwiseXor", kernel_factory(&integer_binary<BitXor>),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BitwiseNot", kernel_factory(&bitwise_not), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "FloorDiv", kernel_factory(&integer_binary<FloorDiv>),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "BitShift", kernel_factory<ShiftKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "BitwiseAnd", kernel_factory(&integer_binary<BitAnd>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "BitwiseOr", kernel_factory(&integer_binary<BitOr>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "BitwiseXor", kernel_factory(&integer_binary<BitXor>), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "BitwiseNot", kernel_factory(&bitwise_not), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
