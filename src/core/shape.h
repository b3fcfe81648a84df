#pragma once
// A concrete tensor shape. Dims live inline so that kernels can build output shapes on the hot
// path without touching the heap.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace onnxtrain {

class TensorShape {
 public:
  static constexpr int kMaxRank = 8;

  TensorShape() = default;
  TensorShape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit TensorShape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }
  template <typename It>
  TensorShape(It first, It last) { assign(first, last); }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  int64_t* begin() { return dims_.data(); }
  int64_t* end() { return dims_.data() + rank_; }
  int64_t back() const { return dims_[rank_ - 1]; }

  void push_back(int64_t d) {
    OT_CHECK(rank_ < kMaxRank, "tensors of rank above ", kMaxRank, " are not supported");
    dims_[rank_++] = d;
  }
  void resize(int rank, int64_t fill = 1) {
    OT_CHECK(rank >= 0 && rank <= kMaxRank, "tensors of rank above ", kMaxRank, " are not supported");
    for (int i = rank_; i < rank; ++i) dims_[i] = fill;
    rank_ = rank;
  }
  void erase(int axis) {
    for (int i = axis; i + 1 < rank_; ++i) dims_[i] = dims_[i + 1];
    --rank_;
  }
  void insert(int axis, int64_t d) {
    OT_CHECK(rank_ < kMaxRank, "tensors of rank above ", kMaxRank, " are not supported");
    for (int i = rank_; i > axis; --i) dims_[i] = dims_[i - 1];
    dims_[axis] = d;
    ++rank_;
  }

  // The element count; throws for a negative dim or a count beyond int64 (a hostile Reshape or
  // Expand target), so no size computed from it can wrap around.
  int64_t numel() const { return size_between(0, rank_); }
  // Product of dims in [from, to), checked as numel().
  int64_t size_between(int from, int to) const {
    int64_t n = 1;
    bool overflow = false, empty = false;
    for (int i = from; i < to; ++i) {
      if (dims_[i] < 0) throw_negative_dim(i);
      empty = empty || dims_[i] == 0;
      overflow = __builtin_mul_overflow(n, dims_[i], &n) || overflow;
    }
    if (empty) return 0;  // a 0 dim anywhere makes the count 0, however large the others
    if (overflow) throw_too_large();
    return n;
  }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  std::string str() const;

  bool operator==(const TensorShape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const TensorShape& o) const { return !(*this == o); }

 private:
  [[noreturn]] void throw_negative_dim(int i) const;
  [[noreturn]] void throw_too_large() const;
  template <typename It>
  void assign(It first, It last) {
    rank_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// Normalizes a possibly negative axis against `rank`; `what` names the op in the error.
int normalize_axis(int64_t axis, int rank, const char* what);

}  // namespace onnxtrain
