"""Custom torch.autograd.Functions while the TorchScript exporter traces: each application becomes
one ai.onnxtrain::PythonOp node. Before emitting the node, the Function runs once off the trace to
learn its outputs' types and which of them it marks non-differentiable or which inputs it
modifies in place (see onnxtrain/_python_op.py for how the engine runs it)."""
import contextlib

import torch

from ..._python_op import UnsupportedFunction, new_function_key, qualified_name, split_arguments
from ..common import ScalarsMustBeBaked, autograd_runs, replaced_function_apply
from . import checkpoint

_pending_outputs = {}

_ONNX_TYPES = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6, torch.int64: 7,
               torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}


class PythonOpNode(torch.autograd.Function):
    """Stands for one application in the trace; its symbolic writes the PythonOp node."""

    @staticmethod
    def forward(ctx, key, class_name, output_dtypes, non_differentiable, dirty, no_gradient, *tensors):
        outputs = _pending_outputs.pop(key)
        return tuple(o.clone() for o in outputs) + (torch.zeros((), dtype=torch.int64),)

    @staticmethod
    def symbolic(g, key, class_name, output_dtypes, non_differentiable, dirty, no_gradient, *tensors):
        attrs = {"function_key_s": key, "class_name_s": class_name, "output_dtypes_i": output_dtypes}
        if no_gradient:
            attrs["no_gradient_inputs_i"] = no_gradient
        if non_differentiable:
            attrs["non_differentiable_outputs_i"] = non_differentiable
        if dirty:
            attrs["dirty_inputs_i"] = dirty
        return g.op("ai.onnxtrain::PythonOp", *tensors, outputs=len(output_dtypes) + 1, **attrs)


def _storage_address(t):
    # untyped_storage on torch 2.x, where storage() warns that TypedStorage is deprecated.
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


def storages(tensors):
    """The storage addresses of `tensors`, to recognize views of them."""
    return {_storage_address(t) for t in tensors if t.numel() > 0}


def export_application(cls, args, apply, functions, caller_storages=frozenset()):
    """Called for cls.apply(*args) while the module is traced: runs the Function once off the
    trace, records it in `functions` (key -> FunctionSpec) and puts one PythonOp in the trace.
    `apply` is PyTorch's own Function.apply; `caller_storages` (see storages()) are the module's
    inputs, parameters and buffers, which an in-place Function may not modify."""
    name = qualified_name(cls)
    spec, tensors = split_arguments(cls, args)
    outputs, returns_tuple, non_differentiable, dirty, dirty_outputs, no_gradient = _probe(spec, tensors, apply)
    for i in dirty:
        if tensors[i].numel() > 0 and _storage_address(tensors[i]) in caller_storages:
            # Eager would change the caller's own tensor; the engine's Function works on a copy.
            raise UnsupportedFunction(
                f"the autograd.Function {name} modifies its input {i} in place, which is the module's own input, "
                "parameter or buffer: onnxtrain runs in-place Functions on values computed inside the module only")
    key = new_function_key()
    functions[key] = spec
    _pending_outputs[key] = outputs
    try:
        results = PythonOpNode.apply(key, name, [_ONNX_TYPES[o.dtype] for o in outputs], non_differentiable,
                                     dirty, no_gradient, *tensors)
    finally:
        _pending_outputs.pop(key, None)
    results = list(results[:-1])  # the context output is the engine's, not the caller's
    for i, k in dirty_outputs.items():
        # As in eager, the modified input is the output, and later readers of it see the change.
        tensors[i].copy_(results[k])
        results[k] = tensors[i]
    return tuple(results) if returns_tuple else results[0]


def _probe(spec, tensors, apply):
    """Runs the Function off the trace on copies of its inputs, every floating one requiring grad:
    its outputs, whether it returns a tuple, which outputs it marks non-differentiable, and which
    inputs it modifies."""
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)  # everything here stays out of the trace
    try:
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
        copies = [leaf.clone() for leaf in leaves]
        versions = [c._version for c in copies]
        with torch.enable_grad():
            raw = apply(*spec.arguments(copies))
        outputs = raw if isinstance(raw, tuple) else (raw,)
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.Tensor):
                raise UnsupportedFunction(
                    f"the autograd.Function {spec.name} returns a {type(o).__name__} as output {k}: onnxtrain "
                    "runs Functions whose outputs are all tensors")
            if o.dtype not in _ONNX_TYPES:
                raise UnsupportedFunction(f"the autograd.Function {spec.name} returns a {o.dtype} tensor as output {k}")
        any_grad = any(leaf.requires_grad for leaf in leaves)
        non_differentiable = [k for k, o in enumerate(outputs)
                              if any_grad and o.is_floating_point() and not o.requires_grad]
        dirty = [i for i, c in enumerate(copies) if c._version != versions[i]]
        dirty_outputs = {}  # input -> the output that is that input, modified
        for i in dirty:
            returned = [k for k, o in enumerate(outputs) if o is copies[i]]
            if not returned:
                raise UnsupportedFunction(
                    f"the autograd.Function {spec.name} modifies its input {i} in place without returning it: "
                    "onnxtrain runs in-place Functions that mark the input dirty (ctx.mark_dirty) and return it")
            dirty_outputs[i] = returned[0]
        no_gradient = _inputs_without_gradient(outputs, leaves)
        detached = tuple(o.detach() for o in outputs)
    finally:
        torch._C._set_tracing_state(state)
    return detached, isinstance(raw, tuple), non_differentiable, dirty, dirty_outputs, no_gradient


def _inputs_without_gradient(outputs, leaves):
    """The inputs for which the Function's backward returns None, found by running it once on
    gradients of ones; [] when it cannot run that way. Eager leaves .grad None for a value reached
    only through such a path, so the engine must know it when it builds the gradient graph."""
    roots = [o for o in outputs if o.requires_grad]
    wanted = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
    if not roots or not wanted:
        return []
    try:
        with torch.enable_grad():
            grads = torch.autograd.grad(roots, [leaves[i] for i in wanted], [torch.ones_like(o) for o in roots],
                                        allow_unused=True)
    except Exception:  # noqa: BLE001 - a backward that needs real gradients: assume every input gets one
        if not autograd_runs():
            # Not the Function's backward: autograd cannot run here at all. [] would give each input
            # the backward returns None for a gradient of zeros (src/ops/python/python_op.cc).
            raise
        return []
    return [i for i, g in zip(wanted, grads) if g is None]


# torch.utils.checkpoint's Function recomputes a segment in backward and differentiates it with
# autograd, so the engine differentiates the segment itself (checkpoint.py); every other Function
# becomes a PythonOp node whose backward is the user's.
_CHECKPOINT = "torch.utils.checkpoint.CheckpointFunction"


@contextlib.contextmanager
def recorded_functions(functions, caller_storages, traced_scalars):
    """While the trace runs, every torch.autograd.Function.apply goes through here: the tracer
    would inline the Function's forward, and differentiating that would silently ignore the
    user's backward. Records each application in `functions` (function_key -> FunctionSpec).
    `caller_storages`: storage addresses of the module's inputs, parameters and buffers. A
    Python number argument reaching a Function must reach it as the number: `traced_scalars`
    holds the ids of the tensors that stand for numbers in the trace."""
    def make_apply(torch_apply_of):
        def apply(cls, *args, **kwargs):
            torch_apply = torch_apply_of(cls)
            if kwargs or torch._C._get_tracing_state() is None or cls is PythonOpNode:
                # Off the trace (a Function applied inside another's forward while it is probed),
                # or keyword arguments, which PyTorch refuses with its own error.
                return torch_apply(*args, **kwargs)
            if qualified_name(cls) == _CHECKPOINT:  # (run_function, preserve_rng_state, *inputs)
                return checkpoint.traced_segment(args)
            if any(id(a) in traced_scalars for a in args):
                raise ScalarsMustBeBaked(f"the autograd.Function {qualified_name(cls)} takes a Python number "
                                         "argument of the module")
            return export_application(cls, args, torch_apply, functions, caller_storages)

        return apply

    with replaced_function_apply(make_apply):
        yield
