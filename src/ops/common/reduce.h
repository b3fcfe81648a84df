#pragma once
// Sum-reduction over an arbitrary set of axes, the building block of ReduceSum, ReduceMean and
// of summing gradients down to a broadcast input's shape.
#include <vector>

#include "core/tensor.h"

namespace onnxtrain {

class ThreadPool;

// out[kept dims] = sum of in over the axes with reduce[d] == true. `out` has in's shape with the
// reduced dims removed or set to 1 (same element order either way).
template <typename T>
void reduce_sum(ThreadPool& pool, const T* in, const TensorShape& in_shape, const std::vector<bool>& reduce, T* out);

// Which axes of `from` must be summed to reach the broadcast-compatible shape `to`.
std::vector<bool> axes_to_reduce_to(const TensorShape& from, const TensorShape& to, const char* what);

}  // namespace onnxtrain
