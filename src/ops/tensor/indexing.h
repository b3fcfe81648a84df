#pragma once
// Helpers shared by the shape and index ops of src/ops/tensor: index normalization with bound
// checks, element-size dispatch for ops that only move data, and a strided copy that covers
// slicing, padding interiors and fixed permutations.
#include <array>
#include <string>
#include <vector>

#include "autodiff/grad_builder.h"
#include "opdef/kernel.h"

namespace onnxtrain {

using Strides = std::array<int64_t, TensorShape::kMaxRank>;

// Row-major element strides of `shape`.
Strides contiguous_strides(const TensorShape& shape);

// Ops that only move elements do not care what the bits mean: one instantiation per element
// size serves every type (bool, float16 and bfloat16 included). fn(TypeTag<uintN_t>{}).
template <typename Fn>
decltype(auto) dispatch_bytes(DType t, const char* what, Fn&& fn) {
  OT_CHECK(t != DType::String && t != DType::Undefined, what, ": element type ", dtype_name(t),
           " is not supported");
  switch (dtype_size(t)) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    default: return fn(TypeTag<uint64_t>{});
  }
}

// Reads an int32/int64 index tensor into `out` (numel entries), adding `bound` to negative
// entries; throws naming the offending entry and the bound when one is outside [-bound, bound).
void normalize_indices(const Tensor& indices, int64_t bound, int64_t* out, const char* what);
// One index: same rule, for indices read one at a time.
int64_t normalize_index(int64_t index, int64_t bound, const char* what);

// The values of a small int32/int64 tensor (starts, pads, repeats, split sizes...).
std::vector<int64_t> int_values(const Tensor& t, const char* what);

// dst[i] = src[i] for every multi-index i of `shape`, both sides addressed with element strides
// (negative and zero strides allowed). `es` is the element size in bytes.
void strided_copy(ThreadPool& pool, size_t es, const TensorShape& shape, const void* src, const Strides& src_strides,
                  void* dst, const Strides& dst_strides);

// dst = src permuted: dst dim d is src dim perm[d]; src is contiguous with `shape`.
void permute_copy(ThreadPool& pool, size_t es, const TensorShape& shape, const std::vector<int>& perm, const void* src,
                  void* dst);

// The `reduction` attribute of ScatterElements and ScatterND (since opset 16; before, none).
enum class ScatterReduction { None, Add, Mul };
ScatterReduction parse_scatter_reduction(const Node& node, int opset);

// Gradient-rule helper: declares `value`'s element type to be `like`'s when that is known.
inline void same_dtype(GradBuilder& g, const std::string& value, const std::string& like) {
  const ValueInfo* vi = g.info(like);
  if (vi && vi->dtype != DType::Undefined) g.set_dtype(value, vi->dtype);
}

// Gradient-rule helper: the declared rank of a forward value, -1 when unknown.
inline int declared_rank_of(const GradBuilder& g, const std::string& value) {
  const ValueInfo* vi = g.info(value);
  return vi && vi->shape ? static_cast<int>(vi->shape->size()) : -1;
}

}  // namespace onnxtrain
