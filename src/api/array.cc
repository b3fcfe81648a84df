// onnxtrain::Array, its conversions to the engine's Tensor, and the small helpers the API's files
// share (file access, names of losses and optimizers).
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "api/internal.h"
#include "io/durable_file.h"
#include "core/error.h"

namespace onnxtrain {
namespace {

DType to_dtype(ElementType t) {
  switch (t) {
    case ElementType::Float32: return DType::Float32;
    case ElementType::Float64: return DType::Float64;
    case ElementType::Int32: return DType::Int32;
    case ElementType::Int64: return DType::Int64;
    case ElementType::Bool: return DType::Bool;
    case ElementType::UInt8: return DType::UInt8;
  }
  return DType::Undefined;
}

template <typename T>
Array make_array(ElementType type, const std::vector<T>& values, std::vector<int64_t> shape) {
  Array a;
  a.type = type;
  a.shape = std::move(shape);
  OT_CHECK(a.numel() == static_cast<int64_t>(values.size()), "an array of shape ", api::shape_string(a.shape),
           " needs ", a.numel(), " values, got ", values.size());
  a.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

template <typename T>
std::vector<T> read_array(const Array& a, ElementType type) {
  OT_CHECK(a.type == type, "the array holds ", element_type_name(a.type), ", read as ", element_type_name(type));
  OT_CHECK(a.bytes.size() == static_cast<size_t>(a.numel()) * sizeof(T), "the array of shape ",
           api::shape_string(a.shape), " holds ", a.bytes.size(), " bytes, not ", a.numel() * sizeof(T));
  std::vector<T> out(static_cast<size_t>(a.numel()));
  if (!out.empty()) std::memcpy(out.data(), a.bytes.data(), a.bytes.size());
  return out;
}

}  // namespace

size_t v1::element_size(ElementType t) {
  switch (t) {
    case ElementType::Float32: case ElementType::Int32: return 4;
    case ElementType::Float64: case ElementType::Int64: return 8;
    case ElementType::Bool: case ElementType::UInt8: return 1;
  }
  OT_THROW("unknown element type ", static_cast<int>(t));
}

const char* v1::element_type_name(ElementType t) {
  switch (t) {
    case ElementType::Float32: return "float32";
    case ElementType::Float64: return "float64";
    case ElementType::Int32: return "int32";
    case ElementType::Int64: return "int64";
    case ElementType::Bool: return "bool";
    case ElementType::UInt8: return "uint8";
  }
  return "unknown";
}

Array Array::from_floats(std::vector<float> values, std::vector<int64_t> shape) {
  return make_array(ElementType::Float32, values, std::move(shape));
}

Array Array::from_int64s(std::vector<int64_t> values, std::vector<int64_t> shape) {
  return make_array(ElementType::Int64, values, std::move(shape));
}

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> Array::floats() const { return read_array<float>(*this, ElementType::Float32); }
std::vector<int64_t> Array::int64s() const { return read_array<int64_t>(*this, ElementType::Int64); }

namespace api {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor to_tensor(const Array& array, const std::string& what) {
  for (int64_t d : array.shape) OT_CHECK(d >= 0, what, " has a negative dimension in shape ", shape_string(array.shape));
  OT_CHECK(static_cast<int>(array.shape.size()) <= TensorShape::kMaxRank, what, " has rank ", array.shape.size(),
           "; at most ", TensorShape::kMaxRank, " is supported");
  const size_t expected = static_cast<size_t>(array.numel()) * element_size(array.type);
  OT_CHECK(array.bytes.size() == expected, what, " (", element_type_name(array.type), shape_string(array.shape),
           ") holds ", array.bytes.size(), " bytes, expected ", expected);
  Tensor t = Tensor::empty(to_dtype(array.type), TensorShape(array.shape));
  if (expected) std::memcpy(t.raw_data(), array.bytes.data(), expected);
  return t;
}

Array to_array(const Tensor& tensor) {
  Array a;
  switch (tensor.dtype()) {
    case DType::Float32: a.type = ElementType::Float32; break;
    case DType::Float64: a.type = ElementType::Float64; break;
    case DType::Int32: a.type = ElementType::Int32; break;
    case DType::Int64: a.type = ElementType::Int64; break;
    case DType::Bool: a.type = ElementType::Bool; break;
    case DType::UInt8: a.type = ElementType::UInt8; break;
    default: OT_THROW("a tensor of type ", dtype_name(tensor.dtype()), " cannot be returned as an onnxtrain::Array");
  }
  for (int i = 0; i < tensor.rank(); ++i) a.shape.push_back(tensor.dim(i));
  a.bytes.resize(tensor.nbytes());
  if (!a.bytes.empty()) std::memcpy(a.bytes.data(), tensor.raw_data(), a.bytes.size());
  return a;
}

void require_file(const std::string& path, const std::string& what) {
  struct stat st {};
  OT_CHECK(::stat(path.c_str(), &st) == 0, what, " '", path, "' does not exist");
  OT_CHECK(S_ISREG(st.st_mode), what, " '", path, "' is not a regular file");
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OT_CHECK(in, "cannot open '", path, "' for reading");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file_bytes(const std::string& path, const std::string& bytes) {
  // Written next to the target and renamed over it: a crash never leaves half a file behind.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    OT_CHECK(out, "cannot open '", tmp, "' for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    OT_CHECK(out.good(), "writing '", tmp, "' failed");
  }
  io::replace_file_durably(tmp, path);
}

const char* loss_name(Loss loss) {
  switch (loss) {
    case Loss::CrossEntropy: return "cross_entropy";
    case Loss::MSE: return "mse";
    case Loss::None: return "none";
  }
  return "?";
}

Loss loss_from_name(const std::string& name) {
  for (Loss l : {Loss::CrossEntropy, Loss::MSE, Loss::None})
    if (name == loss_name(l)) return l;
  OT_THROW("unknown loss '", name, "' (expected cross_entropy, mse or none)");
}

const char* optimizer_name(Optimizer optimizer) { return optimizer == Optimizer::SGD ? "sgd" : "adamw"; }

Optimizer optimizer_from_name(const std::string& name) {
  if (name == "sgd") return Optimizer::SGD;
  if (name == "adamw") return Optimizer::AdamW;
  OT_THROW("unknown optimizer '", name, "' (expected sgd or adamw)");
}

std::vector<std::string> optimizer_state_names(Optimizer optimizer) {
  if (optimizer == Optimizer::SGD) return {"momentum"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace api
}  // namespace onnxtrain
