// The PythonOp bridge (ops/python/python_op.h): the engine's calls into onnxtrain._python_op,
// each holding the GIL for the call only.
#include "bindings/python_op_bridge.h"

#include <pybind11/stl.h>

#include "bindings/dlpack_convert.h"
#include "ops/python/python_op.h"

namespace py = pybind11;

namespace onnxtrain {
namespace {

class PythonFunctionBridge final : public PythonOpBridge {
 public:
  std::vector<Tensor> forward(const std::string& function_key, const std::vector<Tensor>& inputs,
                              const std::vector<bool>& requires_grad, const std::vector<bool>& dirty,
                              int64_t* context) override {
    py::gil_scoped_acquire gil;
    try {
      py::list capsules;
      std::vector<int> bools;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].defined()) {
          capsules.append(py::none());
          continue;
        }
        if (inputs[i].dtype() == DType::Bool) bools.push_back(static_cast<int>(i));
        capsules.append(borrowed_capsule_from_tensor(inputs[i]));
      }
      py::tuple result = module().attr("forward")(function_key, capsules, bools, requires_grad, dirty);
      std::vector<int> bool_outputs = result[1].cast<std::vector<int>>();
      std::vector<Tensor> outputs;
      py::list out_capsules = result[0];
      for (size_t k = 0; k < out_capsules.size(); ++k) {
        bool is_bool = std::find(bool_outputs.begin(), bool_outputs.end(), static_cast<int>(k)) != bool_outputs.end();
        outputs.push_back(tensor_from_capsule(out_capsules[k].cast<py::capsule>(), is_bool ? DType::Bool : DType::Undefined));
      }
      *context = result[2].cast<int64_t>();
      return outputs;
    } catch (py::error_already_set& e) {
      throw Error(e.what());
    }
  }

  std::vector<Tensor> backward(int64_t context, const std::vector<Tensor>& output_grads) override {
    py::gil_scoped_acquire gil;
    try {
      py::list capsules;
      for (const Tensor& g : output_grads)
        capsules.append(g.defined() ? py::object(borrowed_capsule_from_tensor(g)) : py::object(py::none()));
      py::list result = module().attr("backward")(context, capsules);
      std::vector<Tensor> grads;
      for (const auto& item : result)
        grads.push_back(item.is_none() ? Tensor() : tensor_from_capsule(item.cast<py::capsule>()));
      return grads;
    } catch (py::error_already_set& e) {
      throw Error(e.what());
    }
  }

  void release(int64_t context) noexcept override {
    if (context < 0 || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    try {
      module().attr("release")(context);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("onnxtrain: releasing an autograd.Function context");
    }
  }

 private:
  static py::object module() {
    // Imported on first use, never at extension load: onnxtrain._python_op imports torch.
    static py::object* cached = nullptr;
    if (!cached) cached = new py::object(py::module_::import("onnxtrain._python_op"));
    return *cached;
  }
};

}  // namespace

void install_python_function_bridge() { install_python_op_bridge(std::make_shared<PythonFunctionBridge>()); }

}  // namespace onnxtrain
