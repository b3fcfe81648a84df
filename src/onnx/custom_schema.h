#pragma once
// ONNX schemas for onnxtrain's own forward ops (the ones the front end writes into exported
// graphs). ONNX shape inference stops at ops it has no schema for, and every value after them
// would lose its type and shape; with a schema it carries on.
#include <onnx/defs/schema.h>

#include "opdef/op_registry.h"

namespace onnxtrain {

// Registers `schema` (whose domain must be ai.onnxtrain) in ONNX's registry; registers the
// domain itself on first use.
bool register_onnxtrain_schema(onnx::OpSchema schema);

// The schema of an elementwise float32/float64 op of the engine's domain, X -> Y of X's type and
// shape (add attributes to it before registering).
onnx::OpSchema elementwise_float_schema(const char* name, const char* doc);

}  // namespace onnxtrain

#define ONNXTRAIN_SCHEMA(schema)                                               \
  static const bool OT_CONCAT(ot_schema_registered_, __COUNTER__) =           \
      ::onnxtrain::register_onnxtrain_schema(schema)
