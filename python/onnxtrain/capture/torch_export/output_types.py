"""Graph outputs in the types the traced program gives them.

torch 2.15's dynamo ONNX exporter drops a Cast that produces a graph output: a bfloat16 or float16
op that its decomposition computes in float32 (x.abs(), x.sum() on a bfloat16 x: convert to
float32, compute, convert back) ends in a float32 output where eager returns the 16-bit type. The
Casts inside the graph are kept. Each output whose ONNX type differs from the type of the traced
program's output of the same name gets the Cast back.
"""
import onnx
from onnx import TensorProto

import torch

_ONNX_TYPE = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16,
              torch.bfloat16: TensorProto.BFLOAT16, torch.float64: TensorProto.DOUBLE}


def traced_output_types(program):
    """The ONNX element type of each float tensor output of `program`'s graph, by its node's name
    (which the exporter gives the ONNX output)."""
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    types = {}
    for v in values:
        onnx_type = _ONNX_TYPE.get(getattr(getattr(v, "meta", {}).get("val"), "dtype", None))
        if onnx_type is not None:
            types[v.name] = onnx_type
    return types


def restore(model, expected):
    """Casts each float output of `model` whose type is not the one `expected` gives its name back
    to that type; returns the names restored."""
    restored = []
    for out in model.graph.output:
        have, want = out.type.tensor_type.elem_type, expected.get(out.name)
        if want is None or have == want or have not in _ONNX_TYPE.values():
            continue
        computed = out.name + "_before_output_cast"
        for node in model.graph.node:
            node.output[:] = [computed if o == out.name else o for o in node.output]
            node.input[:] = [computed if i == out.name else i for i in node.input]
        for info in model.graph.value_info:
            if info.name == out.name:
                info.name = computed
        model.graph.node.append(onnx.helper.make_node("Cast", [computed], [out.name], to=want,
                                                      name=out.name + "_output_cast"))
        out.type.tensor_type.elem_type = want
        restored.append(out.name)
    return restored
