#pragma once
// The CLI's data: an .npz file's x and y arrays, cut into batches in a reproducible order.
#include <cstdint>
#include <string>
#include <vector>

#include "onnxtrain/onnxtrain.h"

namespace onnxtrain::cli {

// x and y of an .npz file, one example per row of their first dimension. Floating arrays are fed as
// float32 and int32 ones as int64 (NumPy's defaults are float64 and, on some platforms, int32; the
// models torch exports take float32 inputs and int64 class labels); other dtypes pass unchanged.
struct Dataset {
  Array x, y;
  int64_t size() const { return x.shape.empty() ? 0 : x.shape[0]; }
};
Dataset load_dataset(const std::string& path);

// The rows `indices` of `array`, as one batch.
Array gather_rows(const Array& array, const std::vector<int64_t>& indices);

// splitmix64: a tiny generator whose whole state is one integer, so that the checkpoint can carry it
// and a test (tests/python/test_cli.py) can reproduce the order it draws.
class OrderRng {
 public:
  explicit OrderRng(uint64_t state) : state_(state) {}
  uint64_t next();
  uint64_t state() const { return state_; }
  // A uniformly shuffled 0..n-1: Fisher-Yates from the last position down, j = next() % (i + 1).
  std::vector<int64_t> permutation(int64_t n);

 private:
  uint64_t state_;
};

}  // namespace onnxtrain::cli
