#include "core/dtype.h"

namespace onnxtrain {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: case DType::Int32: case DType::UInt32: return 4;
    case DType::Float64: case DType::Int64: case DType::UInt64: return 8;
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int8: case DType::UInt8: case DType::Bool: return 1;
    case DType::Sequence: case DType::Optional: return 0;  // their tensors hold the bytes
    default: OT_THROW("element type ", dtype_name(t), " has no fixed size");
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Undefined: return "undefined";
    case DType::Float32: return "float32";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::UInt16: return "uint16";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::String: return "string";
    case DType::Bool: return "bool";
    case DType::Float16: return "float16";
    case DType::Float64: return "float64";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::BFloat16: return "bfloat16";
    case DType::Sequence: return "sequence";
    case DType::Optional: return "optional";
  }
  return "unknown";
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_integral(DType t) {
  switch (t) {
    case DType::UInt8: case DType::Int8: case DType::UInt16: case DType::Int16: case DType::Int32:
    case DType::Int64: case DType::UInt32: case DType::UInt64: return true;
    default: return false;
  }
}

DType dtype_from_onnx(int32_t onnx_type) {
  switch (onnx_type) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 9: case 10: case 11: case 12:
    case 13: case 16:
      return static_cast<DType>(onnx_type);
    default:
      throw UnsupportedError(str_cat("ONNX element type ", onnx_type, onnx_type == 8 ? " (string)" : "",
                                     " is not supported by onnxtrain"));
  }
}

}  // namespace onnxtrain
