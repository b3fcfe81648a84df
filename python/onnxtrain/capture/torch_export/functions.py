"""Custom torch.autograd.Functions under torch.export: each application becomes one
ai.onnxtrain::PythonOp node, whose forward and backward the engine runs in Python, the user's own
(see onnxtrain/_python_op.py), as the TorchScript capture records them.

torch.export traces fake tensors, and a Function's forward traced inline would be differentiated
by the engine, ignoring its backward. So while it traces, Function.apply calls the custom op
onnxtrain::python_function instead, whose fake kernel runs the Function's forward on the fake
inputs for its outputs' shapes, and whose ONNX translation writes the PythonOp node. What the
node's attributes need (output dtypes, which outputs are non-differentiable, which inputs get no
gradient) comes from a probe of each application on real tensors: an eager run of the module
before the export, with Function.apply recording every application in call order.
"""
from typing import List

import torch

from ..._python_op import UnsupportedFunction, new_function_key, qualified_name, split_arguments
from . import stubs

# function_key -> (spec, torch_apply, probe) for the applications of the export in progress.
_applications = {}


class Probe:
    """What one application's eager run showed: output dtypes (ONNX codes), whether it returns a
    tuple, non-differentiable outputs, inputs that get no gradient."""

    def __init__(self, output_dtypes, returns_tuple, non_differentiable, no_gradient):
        self.output_dtypes = output_dtypes
        self.returns_tuple = returns_tuple
        self.non_differentiable = non_differentiable
        self.no_gradient = no_gradient


def probe(cls, args, torch_apply):
    """Runs one application eagerly on copies of its real inputs: its Probe, and its outputs."""
    from ..torchscript.functions import _ONNX_TYPES, _inputs_without_gradient

    spec, tensors = split_arguments(cls, args)
    with torch.enable_grad():  # the module's eager run is under no_grad; the probe needs autograd
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
        copies = [leaf.clone() for leaf in leaves]
        versions = [c._version for c in copies]
        raw = torch_apply(*spec.arguments(copies))
    outputs = raw if isinstance(raw, tuple) else (raw,)
    for k, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor) or o.dtype not in _ONNX_TYPES:
            raise UnsupportedFunction(f"the autograd.Function {spec.name} returns a {type(o).__name__} as output {k}: "
                                      "onnxtrain runs Functions whose outputs are all tensors")
    if any(c._version != v for c, v in zip(copies, versions)):
        raise UnsupportedFunction(f"the autograd.Function {spec.name} modifies an input in place, which the "
                                  "torch.export capture does not record")
    any_grad = any(leaf.requires_grad for leaf in leaves)
    non_differentiable = [k for k, o in enumerate(outputs) if any_grad and o.is_floating_point() and not o.requires_grad]
    found = Probe([_ONNX_TYPES[o.dtype] for o in outputs], isinstance(raw, tuple), non_differentiable,
                  _inputs_without_gradient(outputs, leaves))
    return found, raw


def _forward(tensors, key):
    spec, torch_apply, _ = _applications[key]
    with torch.no_grad():
        raw = torch_apply(*spec.arguments(list(tensors)))
    outputs = raw if isinstance(raw, tuple) else (raw,)
    return [o.clone() for o in outputs]  # a custom op's outputs may not alias its inputs


@torch.library.custom_op("onnxtrain::python_function", mutates_args=())
def python_function(tensors: List[torch.Tensor], key: str) -> List[torch.Tensor]:
    """The Function's forward (the program runs it for the check of Python number inputs)."""
    return _forward(tensors, key)


@python_function.register_fake
def _python_function_fake(tensors, key):
    return _forward(tensors, key)


def apply_in_trace(cls, args, torch_apply, functions, probes):
    """Function.apply while torch.export traces: the custom op, recorded in `functions`
    (key -> FunctionSpec). `probes` holds this trace's eager probes, in call order."""
    if not probes:
        raise UnsupportedFunction(f"the autograd.Function {qualified_name(cls)} ran in the torch.export trace more "
                                  "often than in the module's eager run (a data-dependent call)")
    found = probes.pop(0)
    spec, tensors = split_arguments(cls, args)
    key = new_function_key()
    functions[key] = spec
    _applications[key] = (spec, torch_apply, found)
    results = python_function(tensors, key)
    return tuple(results) if found.returns_tuple else results[0]


def python_op_translation(tensors, key):
    """The ONNX of onnxtrain::python_function: the stubs of its PythonOp node (stubs.py)."""
    _, _, found = _applications[key]
    return stubs.write(tensors, key, len(found.output_dtypes))


def describe(key):
    """The PythonOp node of one application, for stubs.merge; None for another group."""
    if key not in _applications:
        return None
    spec, _, found = _applications[key]
    attributes = {"function_key": key, "class_name": spec.name, "output_dtypes": found.output_dtypes}
    if found.no_gradient:
        attributes["no_gradient_inputs"] = found.no_gradient
    if found.non_differentiable:
        attributes["non_differentiable_outputs"] = found.non_differentiable
    return "PythonOp", attributes, len(found.output_dtypes), 1  # the engine's context comes last

def forget(functions):
    """Drops the export's applications (`functions`' keys) once its ONNX is written."""
    for key in functions:
        _applications.pop(key, None)
