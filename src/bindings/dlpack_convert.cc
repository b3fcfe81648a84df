#include "bindings/dlpack_convert.h"

namespace py = pybind11;

namespace onnxtrain {
namespace {

DType dtype_from_dl(DLDataType t) {
  OT_CHECK(t.lanes == 1, "vectorized DLPack element types are not supported");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::Float32;
      if (t.bits == 64) return DType::Float64;
      if (t.bits == 16) return DType::Float16;
      break;
    case kDLInt:
      if (t.bits == 64) return DType::Int64;
      if (t.bits == 32) return DType::Int32;
      if (t.bits == 16) return DType::Int16;
      if (t.bits == 8) return DType::Int8;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::UInt8;
      if (t.bits == 1) return DType::Bool;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::BFloat16;
      break;
    default:
      break;
  }
  OT_THROW("DLPack element type (code ", int(t.code), ", ", int(t.bits), " bits) is not supported");
}

DLDataType dl_from_dtype(DType d) {
  switch (d) {
    case DType::Float32: return {kDLFloat, 32, 1};
    case DType::Float64: return {kDLFloat, 64, 1};
    case DType::Float16: return {kDLFloat, 16, 1};
    case DType::BFloat16: return {kDLBfloat, 16, 1};
    case DType::Int64: return {kDLInt, 64, 1};
    case DType::Int32: return {kDLInt, 32, 1};
    case DType::Int16: return {kDLInt, 16, 1};
    case DType::Int8: return {kDLInt, 8, 1};
    case DType::UInt8: return {kDLUInt, 8, 1};
    case DType::Bool: return {kDLUInt, 8, 1};  // torch 1.13 has no DLPack bool; Python views it back
    default: OT_THROW("element type ", dtype_name(d), " cannot be exported through DLPack");
  }
}

struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed;
};

void delete_export(DLManagedTensor* m) { delete static_cast<ExportContext*>(m->manager_ctx); }

}  // namespace

Tensor tensor_from_capsule(py::capsule capsule, DType expected) {
  OT_CHECK(std::string(capsule.name()) == "dltensor", "expected an unused DLPack capsule");
  auto* managed = static_cast<DLManagedTensor*>(capsule.get_pointer());
  const DLTensor& dl = managed->dl_tensor;
  OT_CHECK(dl.device.device_type == kDLCPU, "onnxtrain runs on CPU; got a tensor on DLPack device type ",
           int(dl.device.device_type));
  DType dtype = dtype_from_dl(dl.dtype);
  if (dtype == DType::UInt8 && expected == DType::Bool) dtype = DType::Bool;
  TensorShape shape(dl.shape, dl.shape + dl.ndim);
  if (dl.strides && shape.numel() > 0) {  // an empty tensor's strides say nothing about its layout
    int64_t expect = 1;
    for (int d = dl.ndim - 1; d >= 0; --d) {
      OT_CHECK(dl.shape[d] == 1 || dl.strides[d] == expect, "tensors must be contiguous");
      expect *= dl.shape[d];
    }
  }
  // The capsule is consumed: its producer must not free the tensor, our holder will.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  std::shared_ptr<void> holder(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) {
      // The producer's deleter may release Python objects.
      py::gil_scoped_acquire gil;
      m->deleter(m);
    }
  });
  void* data = static_cast<uint8_t*>(dl.data) + dl.byte_offset;
  return Tensor(dtype, shape, data, std::move(holder));
}

py::capsule capsule_from_tensor(const Tensor& t) {
  OT_CHECK(t.holder(), "internal error: a tensor in arena memory cannot leave the engine");
  return borrowed_capsule_from_tensor(t);
}

py::capsule borrowed_capsule_from_tensor(const Tensor& t) {
  auto* ctx = new ExportContext{t, t.shape().to_vector(), {}};
  DLManagedTensor& m = ctx->managed;
  m.manager_ctx = ctx;
  m.deleter = delete_export;
  m.dl_tensor.data = const_cast<void*>(t.raw_data());
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = t.rank();
  m.dl_tensor.dtype = dl_from_dtype(t.dtype());
  m.dl_tensor.shape = ctx->shape.data();
  m.dl_tensor.strides = nullptr;
  m.dl_tensor.byte_offset = 0;
  return py::capsule(&m, "dltensor", [](PyObject* cap) {
    // Runs when the capsule dies; if torch consumed it, the name changed and torch owns it now.
    if (std::string(PyCapsule_GetName(cap)) != "dltensor") return;
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (managed && managed->deleter) managed->deleter(managed);
  });
}

}  // namespace onnxtrain
