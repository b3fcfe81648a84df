#pragma once
// PythonOp: a PyTorch autograd.Function inside the engine's graph. The engine core knows no
// Python; the Python extension installs a bridge that runs the Function's forward (with a real
// ctx) and its backward, and every PythonOp kernel calls through it.
//
// Node form (exported by python/onnxtrain/_python_op.py):
//   ai.onnxtrain::PythonOp(tensor args...) -> (outputs..., context)
//     function_key          string  the Function application, registered on the Python side
//     class_name            string  for messages
//     output_dtypes         ints    DType of each output (schema type inference, runtime check)
//     non_differentiable_outputs ints  outputs the Function marked non-differentiable
//     dirty_inputs          ints    inputs the Function modifies in place (mark_dirty): it gets a copy
//     input_requires_grad   ints    written by autodiff: ctx.needs_input_grad
//     no_gradient_inputs    ints    inputs whose gradient the backward returns as None (found at export):
//                                   they receive none from this node, as in eager
//   The last output is an int64 scalar naming the ctx; the ctx lives as long as that value.
//   ai.onnxtrain::PythonOpGrad(context, output grads..., forward inputs...) -> input grads...
//     The forward inputs are read so that they stay alive: ctx may hold views of them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace onnxtrain {

class PythonOpBridge {
 public:
  virtual ~PythonOpBridge() = default;
  // Runs the Function on `inputs` (views of engine memory, valid until the context is released).
  // Returns its outputs, each owning its memory, and sets `context`.
  virtual std::vector<Tensor> forward(const std::string& function_key, const std::vector<Tensor>& inputs,
                                      const std::vector<bool>& requires_grad, const std::vector<bool>& dirty,
                                      int64_t* context) = 0;
  // Runs the user's backward for `context`; an undefined output gradient means none reached that
  // output. Returns one tensor per forward input, undefined where the Function returned None.
  virtual std::vector<Tensor> backward(int64_t context, const std::vector<Tensor>& output_grads) = 0;
  // Forgets `context`; called when the context value dies (after backward, or unused).
  virtual void release(int64_t context) noexcept = 0;
};

// Installed by the Python extension when it loads.
void install_python_op_bridge(std::shared_ptr<PythonOpBridge> bridge);

}  // namespace onnxtrain
