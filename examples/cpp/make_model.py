"""Writes the example's model: a 4-16-3 MLP (Gemm, Relu, Gemm) with a dynamic batch dimension and
fixed random weights, as any exporter would (python3 make_model.py mlp.onnx)."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def weight(name, shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return numpy_helper.from_array(rng.uniform(-bound, bound, shape).astype(np.float32), name)


graph = helper.make_graph(
    [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
     helper.make_node("Relu", ["h"], ["r"]),
     helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1)],
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
    [weight("fc1.weight", (16, 4), 4), weight("fc1.bias", (16,), 4),
     weight("fc2.weight", (3, 16), 16), weight("fc2.bias", (3,), 16)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], producer_name="make_model.py")
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
