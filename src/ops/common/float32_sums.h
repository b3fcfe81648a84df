#pragma once
// The output type of an op registered with ONNXTRAIN_FLOAT32_SUMS: its input's, or float32 for
// 16-bit inputs where its node has the attribute to = FLOAT (passes/float32_sums.cc sets it where
// the 16-bit output was only widened to float32). float32 and float64 inputs keep their type, so
// the audit's float64 twin of such a node is the same node.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "ir/graph.h"

namespace onnxtrain {

class Float32Sums {
 public:
  explicit Float32Sums(const Node& node)
      : to_(static_cast<DType>(node.attr_int("to", 0))), node_(node.describe()) {
    OT_CHECK(to_ == DType::Undefined || to_ == DType::Float32, node_, ": 'to' = ", dtype_name(to_),
             ": only FLOAT (float32 sums of 16-bit values) is supported");
  }

  DType output_type(DType input) const {
    return to_ == DType::Float32 && is_16bit_float(input) ? DType::Float32 : input;
  }

 private:
  DType to_;
  std::string node_;
};

}  // namespace onnxtrain
