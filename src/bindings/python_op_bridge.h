#pragma once

namespace onnxtrain {

// Lets PythonOp nodes run torch.autograd.Functions through onnxtrain._python_op.
void install_python_function_bridge();

}  // namespace onnxtrain
