"""The TorchScript capture backend: torch.onnx.export's TorchScript-based exporter (torch 1.13's
only one, torch 2.x's dynamo=False), with onnxtrain's symbolics and rewrites, in training or eval
mode, with every dim dynamic."""
import io
import os
import warnings

import torch

from ... import _io
from ..common import (RANDOM_OPS, Exported, ExportError, FlatModule, numbers_change_the_result, preserved_state,
                      traced_as_in_training)
from .. import onnx_rewrites
from . import checkpoint, functions, split_guards, symbolics, torch_onnx

OPSET = 17


def export_once(module, tensors, input_schema, training):
    import onnx  # deferred: with the export in a child process, only the child loads it

    flat = FlatModule(module, input_schema)
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
    with preserved_state(module), traced_as_in_training(module), symbolics.registered(OPSET), \
            functions.recorded_functions(recorded, functions.storages(list(tensors) + list(module.parameters()) +
                                                                  list(module.buffers())), flat.traced_scalars), \
            checkpoint.marked_checkpoints(), split_guards.guarded_splits(), torch_onnx.tracing_workarounds(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            torch_onnx.export(
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
