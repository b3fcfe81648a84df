#include "cli/data.h"

#include <cstring>
#include <numeric>

#include "io/npz.h"

namespace onnxtrain::cli {
namespace {

template <typename From, typename To>
Array convert(const Array& array, ElementType type) {
  Array out;
  out.type = type;
  out.shape = array.shape;
  const size_t count = array.bytes.size() / sizeof(From);
  out.bytes.resize(count * sizeof(To));
  for (size_t i = 0; i < count; ++i) {
    From value;
    std::memcpy(&value, array.bytes.data() + i * sizeof(From), sizeof(From));
    const To converted = static_cast<To>(value);
    std::memcpy(out.bytes.data() + i * sizeof(To), &converted, sizeof(To));
  }
  return out;
}

Array as_model_type(Array array) {
  if (array.type == ElementType::Float64) return convert<double, float>(array, ElementType::Float32);
  if (array.type == ElementType::Int32) return convert<int32_t, int64_t>(array, ElementType::Int64);
  return array;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

Dataset load_dataset(const std::string& path) {
  auto arrays = io::read_npz(path);
  for (const char* name : {"x", "y"}) {
    if (!arrays.count(name)) {
      std::string present;
      for (const auto& entry : arrays) present += (present.empty() ? "" : ", ") + entry.first;
      throw Error(path + " has no array '" + name + "' (it holds: " + (present.empty() ? "nothing" : present) +
                  "); save the inputs as x and the targets as y, e.g. np.savez(path, x=x, y=y)");
    }
  }
  Dataset data{as_model_type(std::move(arrays["x"])), as_model_type(std::move(arrays["y"]))};
  if (data.x.shape.empty() || data.y.shape.empty()) {
    throw Error(path + ": x and y need a first (example) dimension, but x has shape " + shape_text(data.x.shape) +
                " and y " + shape_text(data.y.shape));
  }
  if (data.x.shape[0] != data.y.shape[0]) {
    throw Error(path + ": x has " + std::to_string(data.x.shape[0]) + " examples (shape " + shape_text(data.x.shape) +
                ") but y has " + std::to_string(data.y.shape[0]) + " (shape " + shape_text(data.y.shape) + ")");
  }
  if (data.x.shape[0] == 0) throw Error(path + " holds no examples (x has shape " + shape_text(data.x.shape) + ")");
  return data;
}

Array gather_rows(const Array& array, const std::vector<int64_t>& indices) {
  const size_t row_bytes = array.bytes.size() / static_cast<size_t>(array.shape[0]);
  Array batch;
  batch.type = array.type;
  batch.shape = array.shape;
  batch.shape[0] = static_cast<int64_t>(indices.size());
  batch.bytes.resize(row_bytes * indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(batch.bytes.data() + i * row_bytes, array.bytes.data() + static_cast<size_t>(indices[i]) * row_bytes,
                row_bytes);
  }
  return batch;
}

uint64_t OrderRng::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<int64_t> OrderRng::permutation(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(next() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace onnxtrain::cli
