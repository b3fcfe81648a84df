#include "ops/tensor/indexing.h"

#include <cstring>

#include "ops/common/elementwise.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

Strides contiguous_strides(const TensorShape& shape) {
  Strides s{};
  int64_t acc = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

int64_t normalize_index(int64_t index, int64_t bound, const char* what) {
  OT_CHECK(index >= -bound && index < bound, what, ": index ", index, " is out of range for a dimension of size ",
           bound, " (valid: [", -bound, ", ", bound - 1, "])");
  return index < 0 ? index + bound : index;
}

namespace {

template <typename I>
void normalize_typed(const I* in, int64_t n, int64_t bound, int64_t* out, const char* what) {
  // One pass that only records whether anything is off, so the loop stays branch-light; the
  // error path rescans to name the first bad entry.
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(in[i]);
    ok &= (v >= -bound) & (v < bound);
    out[i] = v < 0 ? v + bound : v;
  }
  if (ok) return;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(in[i]);
    OT_CHECK(v >= -bound && v < bound, what, ": index ", v, " (entry ", i, " of the indices) is out of range for a ",
             "dimension of size ", bound, " (valid: [", -bound, ", ", bound - 1, "])");
  }
}

}  // namespace

void normalize_indices(const Tensor& indices, int64_t bound, int64_t* out, const char* what) {
  if (indices.dtype() == DType::Int64) {
    normalize_typed(indices.data<int64_t>(), indices.numel(), bound, out, what);
  } else if (indices.dtype() == DType::Int32) {
    normalize_typed(indices.data<int32_t>(), indices.numel(), bound, out, what);
  } else {
    OT_THROW(what, ": indices must be int32 or int64, got ", indices.str());
  }
}

std::vector<int64_t> int_values(const Tensor& t, const char* what) {
  OT_CHECK(t.dtype() == DType::Int64 || t.dtype() == DType::Int32, what, " must be int32 or int64, got ", t.str());
  OT_CHECK(t.rank() <= 1, what, " must be a scalar or 1-D, got ", t.str());
  return t.to_int64_vector();
}

ScatterReduction parse_scatter_reduction(const Node& node, int opset) {
  const std::string r = opset >= 16 ? node.attr_string("reduction", "none") : "none";
  if (r == "none") return ScatterReduction::None;
  if (r == "add") return ScatterReduction::Add;
  if (r == "mul") return ScatterReduction::Mul;
  throw UnsupportedError(str_cat("reduction '", r, "' is not supported (none, add, mul)"));
}

namespace {

template <typename T>
void copy_run(const T* src, int64_t ss, T* dst, int64_t ds, int64_t n) {
  if (ss == 1 && ds == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else if (ds == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * ss];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * ds] = src[i * ss];
  }
}

}  // namespace

void strided_copy(ThreadPool& pool, size_t es, const TensorShape& shape, const void* src, const Strides& src_strides,
                  void* dst, const Strides& dst_strides) {
  if (shape.numel() == 0) return;
  // Drop size-1 dims and merge neighbours that are contiguous with each other on both sides.
  int rank = 0;
  Strides size{}, ss{}, ds{};
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (rank > 0 && ss[rank - 1] == src_strides[d] * shape[d] && ds[rank - 1] == dst_strides[d] * shape[d]) {
      size[rank - 1] *= shape[d];
      ss[rank - 1] = src_strides[d];
      ds[rank - 1] = dst_strides[d];
      continue;
    }
    size[rank] = shape[d];
    ss[rank] = src_strides[d];
    ds[rank] = dst_strides[d];
    ++rank;
  }
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  const int64_t inner = size[rank - 1], iss = ss[rank - 1], ids = ds[rank - 1];
  const int64_t rows = shape.numel() / inner;
  const int outer_rank = rank - 1;
  pool.parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
    Strides idx{};
    int64_t so = 0, dof = 0, rem = r0;
    for (int d = outer_rank - 1; d >= 0; --d) {
      idx[d] = rem % size[d];
      rem /= size[d];
      so += idx[d] * ss[d];
      dof += idx[d] * ds[d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      auto run = [&](auto tag) {
        using T = typename decltype(tag)::type;
        copy_run(static_cast<const T*>(src) + so, iss, static_cast<T*>(dst) + dof, ids, inner);
      };
      switch (es) {
        case 1: run(TypeTag<uint8_t>{}); break;
        case 2: run(TypeTag<uint16_t>{}); break;
        case 4: run(TypeTag<uint32_t>{}); break;
        default: run(TypeTag<uint64_t>{}); break;
      }
      for (int d = outer_rank - 1; d >= 0; --d) {
        if (++idx[d] < size[d]) {
          so += ss[d];
          dof += ds[d];
          break;
        }
        so -= ss[d] * (size[d] - 1);
        dof -= ds[d] * (size[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

void permute_copy(ThreadPool& pool, size_t es, const TensorShape& shape, const std::vector<int>& perm, const void* src,
                  void* dst) {
  const Strides in = contiguous_strides(shape);
  TensorShape out_shape;
  Strides src_strides{};
  for (size_t d = 0; d < perm.size(); ++d) {
    out_shape.push_back(shape[perm[d]]);
    src_strides[d] = in[perm[d]];
  }
  strided_copy(pool, es, out_shape, src, src_strides, dst, contiguous_strides(out_shape));
}

}  // namespace onnxtrain
