#pragma once
// A dense, contiguous, row-major tensor. Memory is either owned through `holder` (heap buffers,
// buffers shared with PyTorch) or borrowed from an arena whose lifetime the executor manages.
#include <cstring>
#include <memory>

#include "core/dtype.h"
#include "core/shape.h"

namespace onnxtrain {

// Bytes of a dense tensor of `shape`: throws when the count overflows, or when the tensor would be
// larger than this machine's physical memory (an allocation that size could only end in the
// kernel's OOM killer, not in an error).
size_t tensor_bytes(DType dtype, const TensorShape& shape);
// Lowers that limit (0 restores physical memory): the fuzzer keeps every tensor small, so that
// a hostile shape is an error it can see rather than memory it runs out of.
void set_tensor_byte_limit(size_t bytes);
// Throws when `bytes` exceed that limit; `what` and `detail` name the allocation in the message.
void check_allocation_size(uint64_t bytes, const char* what, const std::string& detail = "");

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, const TensorShape& shape, void* data, std::shared_ptr<void> holder = nullptr)
      : dtype_(dtype), shape_(shape), data_(data), holder_(std::move(holder)) {}

  // A fresh heap tensor, 64-byte aligned, contents uninitialized.
  static Tensor empty(DType dtype, const TensorShape& shape);
  static Tensor zeros(DType dtype, const TensorShape& shape);
  template <typename T>
  static Tensor scalar(T value) {
    Tensor t = empty(DTypeOf<T>::value, {});
    *t.data<T>() = value;
    return t;
  }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const TensorShape& shape) {
    Tensor t = empty(DTypeOf<T>::value, shape);
    OT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
             " values for shape ", shape.str());
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }

  // A sequence (or optional) value: `items` in order, owned by the returned value. Its shape is
  // [number of items]; kernels read it through items(), never through data().
  static Tensor list(DType kind, std::vector<Tensor> items);
  bool is_list() const { return is_list_kind(dtype_); }
  const std::vector<Tensor>& items() const;

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<void>& holder() const { return holder_; }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    check_type<T>();
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type<T>();
    return static_cast<const T*>(data_);
  }

  // Same memory, another shape with the same element count.
  Tensor view(const TensorShape& shape) const;
  Tensor clone() const;
  void copy_from(const Tensor& src);  // same dtype and element count
  std::string str() const;            // "float32[2x3]"

  // Reads element i converted to double: for shape inputs and tests, not for kernels' inner loops.
  double item_as_double(int64_t i = 0) const;
  int64_t item_as_int(int64_t i = 0) const;
  std::vector<int64_t> to_int64_vector() const;

 private:
  template <typename T>
  void check_type() const {
    OT_CHECK(DTypeOf<T>::value == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
             dtype_name(DTypeOf<T>::value));
  }
  DType dtype_ = DType::Undefined;
  TensorShape shape_;
  void* data_ = nullptr;
  std::shared_ptr<void> holder_;
};

std::shared_ptr<void> allocate_aligned(size_t bytes);

}  // namespace onnxtrain
