"""What this capture does not record as eager runs it, refused by name, so that the front end's
fallback (the TorchScript capture) exports the module instead, saying why.

While torch.export traces (a custom autograd.Function becomes a PythonOp there, functions.py, and
a checkpoint segment is marked, checkpoints.py):

- A Function that modifies its input in place, or returns anything but tensors.

In the traced program (refuse_differing_ops): ATen ops whose onnxscript translation differs from
eager where the TorchScript capture has onnxtrain's own symbolic (capture/torchscript/symbolics*.py),
each found by the suite run on this backend: where ties send a gradient (amax and amin, adaptive
max pooling), NaN propagation (log_sigmoid, native_group_norm), multinomial's draws, and float64
values (Python float constants pass through float32). float16 and bfloat16 nodes are taken: the
exporter's decompositions compute them in float32 as eager does, and where they do not the engine
widens each 16-bit op to float32 and rounds once; the output types the exporter loses are
restored (output_types.py). The
losses, integer division and max/min along a dim, which onnxscript also writes otherwise than
eager, get onnxtrain's own translations instead (translations_losses.py, translations_integers.py).
"""
import contextlib

import torch

from ..._python_op import UnsupportedFunction, qualified_name
from ..common import ScalarsMustBeBaked, replaced_function_apply
from ..torchscript.checkpoint import replaced_checkpoint


class NotCapturable(RuntimeError):
    """A construct the torch.export capture cannot record as eager runs it."""


def _is_torch_own(cls):
    return (cls.__module__ or "").startswith("torch.")


class NeedsProbes(Exception):
    """The trace met a custom autograd.Function before the module's eager run probed them."""


_depth = [0]  # > 0 inside a Function's own forward, where applications run as they are


@contextlib.contextmanager
def _inside_function():
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1


@contextlib.contextmanager
def traced_constructs(functions, probes):
    """While torch.export traces: a custom autograd.Function becomes a PythonOp (functions.py) once
    `probes` (a list, from probed_functions) holds its eager probes; before, NeedsProbes. A
    checkpoint's segment is traced between markers (checkpoints.py)."""
    from . import checkpoints
    from . import functions as python_functions

    def make_apply(torch_apply_of):
        def apply(cls, *args, **kwargs):
            torch_apply = torch_apply_of(cls)
            if _is_torch_own(cls) or _depth[0] or kwargs:
                return torch_apply(*args, **kwargs)
            if probes is None:
                raise NeedsProbes(qualified_name(cls))
            with _inside_function():
                try:
                    return python_functions.apply_in_trace(cls, args, _quiet(torch_apply), functions, probes)
                except UnsupportedFunction as e:
                    raise NotCapturable(str(e)) from None

        return apply

    with replaced_function_apply(make_apply), replaced_checkpoint(checkpoints.traced_segment):
        yield


def _quiet(torch_apply):
    """torch_apply with the Functions its forward applies run as they are (the fake kernel)."""
    def run(*args):
        with _inside_function():
            return torch_apply(*args)

    return run


@contextlib.contextmanager
def probed_functions(probes):
    """While the module runs eagerly before the export: every custom Function application is
    probed (functions.probe) in call order into `probes`, and returns its real outputs."""
    from . import functions as python_functions

    def make_apply(torch_apply_of):
        def apply(cls, *args, **kwargs):
            torch_apply = torch_apply_of(cls)
            if _is_torch_own(cls) or _depth[0] or kwargs:
                return torch_apply(*args, **kwargs)
            if any(hasattr(a, "_onnxtrain_python_value") for a in args):
                raise ScalarsMustBeBaked(f"the autograd.Function {qualified_name(cls)} takes a Python number "
                                         "argument of the module")
            with _inside_function():
                try:
                    found, raw = python_functions.probe(cls, args, torch_apply)
                except UnsupportedFunction as e:
                    raise NotCapturable(str(e)) from None
            probes.append(found)
            return raw

        return apply

    with replaced_function_apply(make_apply):
        yield


_DIFFERING = {
    "amax": "is not checked against eager's tie gradients (the TorchScript capture has onnxtrain's own)",
    "amin": "is not checked against eager's tie gradients (the TorchScript capture has onnxtrain's own)",
    "adaptive_max_pool1d": "ties in a window route the gradient otherwise than eager",
    "adaptive_max_pool2d": "ties in a window route the gradient otherwise than eager",
    "adaptive_max_pool3d": "ties in a window route the gradient otherwise than eager",
    "log_sigmoid": "NaN and large inputs are handled otherwise than eager",
    "log_sigmoid_forward": "NaN and large inputs are handled otherwise than eager",
    "native_group_norm": "NaN propagates otherwise than eager",
    "multinomial": "draws without replacement are not eager's",
}


def _op_name(target):
    name = getattr(target, "__name__", str(target))  # an OpOverload: "max.dim"
    return name.split(".")[0]


def refuse_differing_ops(program):
    """Raises NotCapturable for the first op of `program` that onnxscript translates otherwise
    than eager runs it (see the module docstring)."""
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        why = _DIFFERING.get(name)
        if why is not None:
            raise NotCapturable(f"aten.{name} (node {node.name}): onnxscript's ONNX for it {why}")
        value = node.meta.get("val")
        dtype = str(getattr(value, "dtype", "")).replace("torch.", "")
        if dtype == "float64":
            raise NotCapturable(f"node {node.name} computes in float64: onnxscript writes Python float constants "
                                "through float32, which loses a float64 model's precision")
