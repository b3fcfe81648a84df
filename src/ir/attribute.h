#pragma once
// Node attributes, mirroring ONNX's AttributeProto kinds.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace onnxtrain {

class Graph;

struct Attribute {
  // TypeProto: ONNX's type attributes (Optional's 'type'), kept as the serialized proto in `s`.
  enum class Kind { Float, Int, String, Tensor, Graph, Floats, Ints, Strings, TypeProto };
  Kind kind = Kind::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  onnxtrain::Tensor t;
  std::shared_ptr<onnxtrain::Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute of_int(int64_t v) { Attribute a; a.kind = Kind::Int; a.i = v; return a; }
  static Attribute of_float(float v) { Attribute a; a.kind = Kind::Float; a.f = v; return a; }
  static Attribute of_string(std::string v) { Attribute a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Attribute of_ints(std::vector<int64_t> v) { Attribute a; a.kind = Kind::Ints; a.ints = std::move(v); return a; }
  static Attribute of_floats(std::vector<float> v) { Attribute a; a.kind = Kind::Floats; a.floats = std::move(v); return a; }
  static Attribute of_strings(std::vector<std::string> v) { Attribute a; a.kind = Kind::Strings; a.strings = std::move(v); return a; }
  static Attribute of_tensor(onnxtrain::Tensor v) { Attribute a; a.kind = Kind::Tensor; a.t = std::move(v); return a; }
};

using AttributeMap = std::map<std::string, Attribute>;

}  // namespace onnxtrain
