"""torch.onnx.export of a module, in training or eval mode, with every dim dynamic."""
import contextlib
import io
import os
import warnings

import torch

from . import _io, _rewrite, _symbolics

OPSET = 17


class ExportError(RuntimeError):
    """torch.onnx.export could not export the module."""


class _FlatModule(torch.nn.Module):
    """Takes and returns flat tensor tuples, so the ONNX graph has one input per tensor."""

    def __init__(self, module, input_schema):
        super().__init__()
        self.module = module
        self.input_schema = input_schema
        self.output_schema = None

    def forward(self, *tensors):
        args, kwargs = _io.unflatten_inputs(self.input_schema, tensors)
        out = self.module(*args, **kwargs)
        flat, self.output_schema = _io.flatten_outputs(out)
        return tuple(flat)


@contextlib.contextmanager
def _preserved_state(module):
    """Export runs forward: keep buffers (BatchNorm statistics) and the RNG where they were."""
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.random.set_rng_state(rng)


class Exported:
    """An exported graph and how its inputs and outputs map to the module's."""

    def __init__(self, model_bytes, graph_inputs, output_schema, num_user_outputs, buffer_updates,
                 trace_warnings=(), bakes_scalars=False):
        self.model_bytes = model_bytes
        # One entry per graph input: ("input", index into the flat user tensors) or
        # ("param", name of a parameter or buffer of the module). Unused inputs are absent.
        self.graph_inputs = graph_inputs
        self.output_schema = output_schema
        # The module's outputs come first; new buffer values (BatchNorm statistics) follow.
        self.num_user_outputs = num_user_outputs
        self.buffer_updates = buffer_updates
        # What the tracer warned about (its trace may not generalize), and whether a Python
        # number input was baked into the graph, so that its value must key the export.
        self.trace_warnings = list(trace_warnings)
        self.bakes_scalars = bakes_scalars


def export(module, tensors, input_schema, training):
    """Exports `module` called on the inputs described by (tensors, input_schema)."""
    import onnx  # deferred: only needed here

    flat = _FlatModule(module, input_schema)
    # torch.onnx.export restores the wrapper's mode afterwards, and with it the module's.
    flat.train(module.training)
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = {name: {d: f"{name}_dim{d}" for d in range(t.dim())} for name, t in zip(input_names, tensors)}
    buffer = io.BytesIO()
    # Eval graphs are exported with PRESERVE (the module is in eval mode): EVAL would also run
    # torch's eval peephole, which folds BatchNorm into Conv as new weights that are not the
    # module's parameters, so they could neither be fed nor follow the optimizer.
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.PRESERVE
    error = None
    with _preserved_state(module), torch.no_grad(), _symbolics.registered(OPSET), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                flat, tuple(t.detach() for t in tensors), buffer, input_names=input_names,
                dynamic_axes=dynamic_axes, opset_version=OPSET, training=mode, do_constant_folding=False,
                export_params=False, keep_initializers_as_inputs=True)
        except Exception as e:  # noqa: BLE001 - every export failure is reported the same way
            # Keep only the text: a live exception from a failed torch 1.13 export breaks later exports.
            error = f"{type(e).__name__}: {e}"
    if error is not None:
        raise ExportError(f"torch.onnx.export failed for {type(module).__name__}: {error}")
    if flat.output_schema is None:
        raise ExportError(f"torch.onnx.export did not run the forward of {type(module).__name__}")

    model = onnx.load_from_string(buffer.getvalue())
    num_user_outputs = len(model.graph.output)
    try:
        buffer_updates = _rewrite.adapt_to_pytorch(model, module)
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
    bakes_scalars = bool(scalars) and (any(user for _, user in trace_warnings) or any(i not in used for i in scalars))
    return Exported(model.SerializeToString(), graph_inputs, flat.output_schema, num_user_outputs, buffer_updates,
                    trace_warnings, bakes_scalars)
