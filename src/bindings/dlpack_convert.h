#pragma once
// Zero-copy exchange of tensors with PyTorch through DLPack capsules.
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace onnxtrain {

// Wraps a "dltensor" capsule (from torch.utils.dlpack.to_dlpack) without copying; the tensor
// keeps the producer's memory alive. `expected` resolves bool, which torch 1.13 sends as uint8.
Tensor tensor_from_capsule(pybind11::capsule capsule, DType expected = DType::Undefined);

// A "dltensor" capsule sharing `t`'s memory; the capsule keeps it alive.
pybind11::capsule capsule_from_tensor(const Tensor& t);
// The same for a tensor that may live in an arena: the caller guarantees that the memory stays
// valid for as long as the receiver keeps the tensor (PythonOp keeps its inputs alive until the
// Function's backward has run).
pybind11::capsule borrowed_capsule_from_tensor(const Tensor& t);

}  // namespace onnxtrain
