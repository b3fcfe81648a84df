"""The TorchScript capture backend: torch.onnx.export's TorchScript-based exporter (torch 1.13's
only one, torch 2.x's dynamo=False), with onnxtrain's symbolics and rewrites, in training or eval
mode, with every dim dynamic."""
import contextlib
import io
import os
import sys
import warnings

import torch

from ... import _io
from ..common import (RANDOM_OPS, Exported, ExportError, FlatModule, numbers_change_the_result, preserved_state,
                      timed_phase, traced_as_in_training)
from .. import onnx_rewrites
from . import checkpoint, functions, split_guards, symbolics, torch_onnx

OPSET = 17


@contextlib.contextmanager
def _gradient_cuts_watched(flat, cuts):
    """Records in `cuts` each way the module's forward cuts values off from autograd that the
    TorchScript trace does not record: turning gradients off (torch.no_grad(),
    torch.set_grad_enabled(False)) while they are on, whose block the trace records as any other
    ops, so the engine would differentiate through it; and reading a tensor's .data, which the
    trace bakes in as a constant of the example input's values."""
    original_set = torch._C._set_grad_enabled
    base = next(c for c in torch.Tensor.__mro__[1:] if "data" in c.__dict__)
    data = base.__dict__["data"]
    inside = [0]
    forward = flat.forward
    torch_dir = os.path.dirname(torch.__file__)

    def watched_forward(*args):
        inside[0] += 1
        try:
            return forward(*args)
        finally:
            inside[0] -= 1

    onnxtrain_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    grad_mode_files = ("grad_mode.py", "_contextlib.py")

    def from_user_code():
        """Whether the code that turned gradients off is the user's: the caller of torch's grad-mode
        context managers, when it is neither torch (whose own no_grad blocks are not traced ops)
        nor onnxtrain."""
        frame = sys._getframe(2)
        while frame is not None and os.path.basename(frame.f_code.co_filename) in grad_mode_files:
            if frame.f_code.co_name == "__exit__":
                return False  # the end of an enable_grad() block restoring gradients off
            frame = frame.f_back
        if frame is None:
            return False
        caller = os.path.abspath(frame.f_code.co_filename)
        return not caller.startswith(torch_dir) and not caller.startswith(onnxtrain_dir)

    def set_grad_enabled(mode):
        if inside[0] and not mode and torch.is_grad_enabled() and from_user_code():
            cuts.append("turns gradients off (torch.no_grad() or torch.set_grad_enabled(False)), whose block the "
                        "TorchScript capture records as any other ops: the engine would differentiate through it. "
                        "Detach the block's results (x.detach()), or use the torch.export capture (torch 2.6 and "
                        "later), which records the block")
        return original_set(mode)

    def read_data(tensor):
        caller = sys._getframe(1).f_code.co_filename
        if inside[0] and not os.path.abspath(caller).startswith(torch_dir):
            cuts.append("reads a tensor's .data, which the TorchScript capture records as a constant of the "
                        "example input's values: use x.detach() instead")
        return data.__get__(tensor)

    flat.forward = watched_forward
    torch._C._set_grad_enabled = set_grad_enabled
    torch.Tensor.data = property(read_data, data.__set__)
    try:
        yield
    finally:
        del torch.Tensor.data
        torch._C._set_grad_enabled = original_set
        del flat.forward


# The traced ops through which a size stays a number: a cache's count of tokens seen is one.
_INTEGER_ARITHMETIC = frozenset({"aten::add", "aten::sub", "aten::mul", "aten::floordiv", "aten::floor_divide",
                                 "aten::div", "aten::remainder", "aten::neg", "aten::max", "aten::min", "aten::clamp",
                                 "aten::Int", "aten::to", "aten::detach", "aten::clone"})


def _traced_number(t):
    """Whether a 0-d integer tensor met while a TorchScript trace runs stands for a Python int in
    eager: the tracer turns a size (x.shape[1]) into a tensor, and arithmetic on it stays one.
    It does so by walking the value's trace back to prim::NumToTensor through integer arithmetic."""
    if not isinstance(t, torch.Tensor) or t.dim() != 0 or t.is_floating_point() or torch._C._get_tracing_state() is None:
        return False
    try:
        value = torch._C._get_value_trace(t)
    except RuntimeError:  # not produced inside this trace
        return False
    pending, seen = [value.node()], 0
    while pending and seen < 64:
        node = pending.pop()
        seen += 1
        if node.kind() == "prim::NumToTensor":
            return True
        if node.kind() in _INTEGER_ARITHMETIC:
            pending.extend(i.node() for i in node.inputs())
    return False


def export_once(module, tensors, input_schema, training):
    import onnx  # deferred: with the export in a child process, only the child loads it

    flat = FlatModule(module, input_schema, traced_number=_traced_number)
    # Only the wrapper's own flag: train() would also set every submodule's, and a submodule the
    # user put in eval mode (a frozen BatchNorm) must be traced as eager runs it.
    flat.training = module.training
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = {name: {d: f"{name}_dim{d}" for d in range(t.dim())} for name, t in zip(input_names, tensors)}
    buffer = io.BytesIO()
    # PRESERVE in both modes: each submodule is traced in its own mode, as eager runs it (TRAINING
    # would put them all in training mode), and EVAL would also run torch's eval peephole, which
    # folds BatchNorm into Conv as new weights that are not the module's parameters, so they could
    # neither be fed nor follow the optimizer. The root's mode (`training`) keys the export.
    mode = torch.onnx.TrainingMode.PRESERVE
    error = None
    recorded = {}
    gradient_cuts = []
    with preserved_state(module), traced_as_in_training(module), _gradient_cuts_watched(flat, gradient_cuts), \
            symbolics.registered(OPSET), \
            functions.recorded_functions(recorded, functions.storages(list(tensors) + list(module.parameters()) +
                                                                  list(module.buffers())), flat.traced_scalars), \
            checkpoint.marked_checkpoints(), split_guards.guarded_splits(), torch_onnx.tracing_workarounds(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            with timed_phase("torch.onnx.export"):
                torch_onnx.export(
                        flat, tuple(t.detach() for t in tensors), buffer, input_names=input_names,
                    dynamic_axes=dynamic_axes, opset_version=OPSET, training=mode, do_constant_folding=False,
                    export_params=False, keep_initializers_as_inputs=True)
        except Exception as e:  # noqa: BLE001 - every export failure is reported the same way
            # Keep only the text: a live exception from a failed torch 1.13 export breaks later exports.
            error = f"{type(e).__name__}: {e}"
    if error is not None:
        raise ExportError(f"torch.onnx.export failed for {type(module).__name__}: {error}")
    if gradient_cuts:
        raise ExportError(f"the forward of {type(module).__name__} {gradient_cuts[0]}")
    if flat.output_schema is None:
        raise ExportError(f"torch.onnx.export did not run the forward of {type(module).__name__}")

    model = onnx.load_from_string(buffer.getvalue())
    num_user_outputs = len(model.graph.output)
    try:
        buffer_updates = onnx_rewrites.adapt_to_pytorch(model, module)
    except ValueError as e:
        raise ExportError(str(e)) from None
    graph_inputs = []
    for graph_input in model.graph.input:
        name = graph_input.name
        if name in input_names:
            graph_inputs.append(("input", input_names.index(name)))
        elif name.startswith("module."):
            graph_inputs.append(("param", name[len("module."):]))
        else:
            raise ExportError(f"exported graph input {name!r} is neither a module input nor a parameter")
    # (message, raised by the user's own code): torch's internals warn about harmless checks
    # (BatchNorm's batch-size check), the user's code about real data-dependent branches.
    torch_dir = os.path.dirname(torch.__file__)
    trace_warnings = [(str(w.message), not os.path.abspath(w.filename).startswith(torch_dir))
                      for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    scalars = _io.scalar_positions(input_schema)
    used = {ref for kind, ref in graph_inputs if kind == "input"}
    bakes_scalars = bool(scalars) and (any(user for _, user in trace_warnings) or any(i not in used for i in scalars)
                                       or numbers_change_the_result(module, flat, tensors, input_schema))
    return Exported(model.SerializeToString(), graph_inputs, flat.output_schema, num_user_outputs, buffer_updates,
                    trace_warnings, bakes_scalars, [i.name for i in model.graph.input],
                    [o.name for o in model.graph.output], any(n.op_type in RANDOM_OPS for n in model.graph.node),
                    recorded)
