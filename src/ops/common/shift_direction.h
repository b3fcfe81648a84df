#pragma once
// The 'direction' attribute of both BitShift ops (ONNX's unsigned one and onnxtrain's signed one
// with PyTorch's out-of-range rules): true for LEFT, false for RIGHT, an error for anything else.
#include "core/error.h"
#include "ir/graph.h"

namespace onnxtrain {

inline bool shifts_left(const Node& node) {
  OT_CHECK(node.has_attr("direction"), "BitShift needs the attribute 'direction'");
  const std::string d = node.attr_string("direction", "");
  OT_CHECK(d == "LEFT" || d == "RIGHT", "BitShift: attribute 'direction' is '", d, "', must be LEFT or RIGHT");
  return d == "LEFT";
}

}  // namespace onnxtrain
