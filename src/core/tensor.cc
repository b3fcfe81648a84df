#include "core/tensor.h"

#include "core/buffer_cache.h"

#include <cstdlib>
#include <sstream>

#include "core/half.h"

namespace onnxtrain {

std::string TensorShape::str() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank_; ++i) os << (i ? "x" : "") << dims_[i];
  os << "]";
  return os.str();
}

int normalize_axis(int64_t axis, int rank, const char* what) {
  OT_CHECK(axis >= -rank && axis < std::max(rank, 1), what, ": axis ", axis,
           " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::shared_ptr<void> allocate_aligned(size_t bytes) { return allocate_buffer(bytes); }

Tensor Tensor::empty(DType dtype, const TensorShape& shape) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto holder = allocate_aligned(bytes);
  void* data = holder.get();
  return Tensor(dtype, shape, data, std::move(holder));
}

Tensor Tensor::zeros(DType dtype, const TensorShape& shape) {
  Tensor t = empty(dtype, shape);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::view(const TensorShape& shape) const {
  OT_CHECK(shape.numel() == numel(), "cannot view ", str(), " as ", shape.str());
  return Tensor(dtype_, shape, data_, holder_);
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw_data(), data_, nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  OT_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy_from: ", src.str(), " into ", str());
  if (nbytes() && src.data_ != data_) std::memcpy(data_, src.data_, nbytes());
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_.str(); }

double Tensor::item_as_double(int64_t i) const {
  OT_CHECK(i >= 0 && i < numel(), "element ", i, " out of range for ", str());
  if (dtype_ == DType::Bool) return static_cast<const bool*>(data_)[i] ? 1.0 : 0.0;
  if (dtype_ == DType::Float16) return half_to_double(static_cast<const Half*>(data_)[i]);
  if (dtype_ == DType::BFloat16) return bfloat16_to_double(static_cast<const BHalf*>(data_)[i]);
  return dispatch_numeric(dtype_, "item", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<const T*>(data_)[i]);
  });
}

int64_t Tensor::item_as_int(int64_t i) const {
  OT_CHECK(i >= 0 && i < numel(), "element ", i, " out of range for ", str());
  if (dtype_ == DType::Bool) return static_cast<const bool*>(data_)[i] ? 1 : 0;
  return dispatch_numeric(dtype_, "item", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<int64_t>(static_cast<const T*>(data_)[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = item_as_int(i);
  return out;
}

}  // namespace onnxtrain
