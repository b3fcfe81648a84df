"""torch.onnx.export of a module, in training or eval mode, with every dim dynamic."""
import contextlib
import io

import torch

from . import _io

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

    def __init__(self, model_bytes, graph_inputs, output_schema, num_outputs):
        self.model_bytes = model_bytes
        # One entry per graph input: ("input", index into the flat user tensors) or
        # ("param", name of a parameter or buffer of the module). Unused inputs are absent.
        self.graph_inputs = graph_inputs
        self.output_schema = output_schema
        self.num_outputs = num_outputs


def export(module, tensors, input_schema, training):
    """Exports `module` called on the inputs described by (tensors, input_schema)."""
    import onnx  # deferred: only needed here

    flat = _FlatModule(module, input_schema)
    # torch.onnx.export restores the wrapper's mode afterwards, and with it the module's.
    flat.train(module.training)
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = {name: {d: f"{name}_dim{d}" for d in range(t.dim())} for name, t in zip(input_names, tensors)}
    buffer = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    error = None
    with _preserved_state(module), torch.no_grad():
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
    graph_inputs = []
    for graph_input in model.graph.input:
        name = graph_input.name
        if name in input_names:
            graph_inputs.append(("input", input_names.index(name)))
        elif name.startswith("module."):
            graph_inputs.append(("param", name[len("module."):]))
        else:
            raise ExportError(f"exported graph input {name!r} is neither a module input nor a parameter")
    return Exported(buffer.getvalue(), graph_inputs, flat.output_schema, len(model.graph.output))
