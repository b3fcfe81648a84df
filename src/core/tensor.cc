#include "core/tensor.h"

#include "core/buffer_cache.h"

#include <unistd.h>

#include <atomic>
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

void TensorShape::throw_negative_dim(int i) const {
  OT_THROW("shape ", str(), " has a negative dimension (", dims_[i], " at axis ", i, ")");
}

void TensorShape::throw_too_large() const {
  OT_THROW("shape ", str(), " has more elements than a 64-bit size can count");
}

int normalize_axis(int64_t axis, int rank, const char* what) {
  OT_CHECK(axis >= -rank && axis < std::max(rank, 1), what, ": axis ", axis,
           " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::shared_ptr<void> allocate_aligned(size_t bytes) { return allocate_buffer(bytes); }

namespace {
uint64_t physical_memory_bytes() {
  static const uint64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
  }();
  return bytes;
}
std::atomic<uint64_t> tensor_byte_limit{0};  // 0: physical memory
}  // namespace

void set_tensor_byte_limit(size_t bytes) { tensor_byte_limit.store(bytes); }

void check_allocation_size(uint64_t bytes, const char* what, const std::string& detail) {
  const uint64_t set = tensor_byte_limit.load(std::memory_order_relaxed);
  const uint64_t limit = set ? set : physical_memory_bytes();
  OT_CHECK(bytes <= limit, what, detail, " needs ", bytes >> 20, " MiB, more than ",
           set ? "the tensor size limit" : "this machine's memory", " (", limit >> 20, " MiB)");
}

size_t tensor_bytes(DType dtype, const TensorShape& shape) {
  uint64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(shape.numel()), dtype_size(dtype), &bytes);
  OT_CHECK(!overflow, dtype_name(dtype), shape.str(), " has more bytes than a 64-bit size can count");
  check_allocation_size(bytes, dtype_name(dtype), shape.str());
  return static_cast<size_t>(bytes);
}

Tensor Tensor::empty(DType dtype, const TensorShape& shape) {
  const size_t bytes = tensor_bytes(dtype, shape);
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

Tensor Tensor::list(DType kind, std::vector<Tensor> items) {
  OT_CHECK(is_list_kind(kind), "Tensor::list takes sequence or optional, not ", dtype_name(kind));
  OT_CHECK(kind != DType::Optional || items.size() <= 1, "an optional value holds at most one element");
  auto held = std::make_shared<std::vector<Tensor>>(std::move(items));
  const int64_t n = static_cast<int64_t>(held->size());
  return Tensor(kind, TensorShape{n}, held.get(), held);
}

const std::vector<Tensor>& Tensor::items() const {
  OT_CHECK(is_list(), "expected a sequence or optional value, got the tensor ", str());
  return *static_cast<const std::vector<Tensor>*>(data_);
}

Tensor Tensor::clone() const {
  if (is_list()) {
    std::vector<Tensor> copies;
    for (const Tensor& t : items()) copies.push_back(t.clone());
    return list(dtype_, std::move(copies));
  }
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw_data(), data_, nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  OT_CHECK(!is_list() && !src.is_list(), "copy_from: ", src.str(), " into ", str(), ": lists are shared, not copied");
  OT_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy_from: ", src.str(), " into ", str());
  if (nbytes() && src.data_ != data_) std::memcpy(data_, src.data_, nbytes());
}

std::string Tensor::str() const {
  if (is_list()) return str_cat(dtype_name(dtype_), "(", shape_[0], " element", shape_[0] == 1 ? "" : "s", ")");
  return std::string(dtype_name(dtype_)) + shape_.str();
}

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
