"""torch.export's training IR of the module called on the flat inputs, every dim dynamic where the
code allows (Dim.AUTO), converted to ONNX by torch's dynamo exporter. Dims the code fixes (a view
to a constant size), the ranges torch.export assumed for the others and its guards on the sizes
are kept with the export: a call outside them gets an export of its own (Exported.misfit)."""
import contextlib
import io
import logging
import warnings

import torch

from ... import _io
from .. import onnx_rewrites
from ..common import (RANDOM_OPS, Exported, ExportError, FlatModule, diagnose_input_dtypes, numbers_change_the_result,
                      preserved_state, timed_phase, traced_as_in_training)
from . import checkpoints, stubs
from . import functions as python_functions
from . import opset17, output_types, refused, translations


def _dim_ranges(program, num_inputs):
    """Per flat input, per dim: (lowest, highest or None) that the exported graph holds for."""
    ranges = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != torch.export.graph_signature.InputKind.USER_INPUT:
            continue
        node = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == spec.arg.name)
        value = node.meta.get("val")
        dims = []
        for size in getattr(value, "shape", ()):
            if isinstance(size, int):
                dims.append((size, size))
                continue
            bounds = program.range_constraints.get(size.node.expr)
            lower = _finite(bounds.lower) if bounds is not None else None
            upper = _finite(bounds.upper) if bounds is not None else None
            lower = 0 if lower is None else lower
            dims.append((lower, upper))
        ranges.append(tuple(dims))
    if len(ranges) != num_inputs:
        raise ExportError(f"torch.export kept {len(ranges)} of the {num_inputs} inputs")
    return tuple(ranges)


def _finite(bound):
    """A sympy bound as an int; None for an infinite one (torch's int_oo does not convert)."""
    if bound.is_finite is not True:
        return None
    try:
        return int(bound)
    except (TypeError, ValueError, AttributeError):
        return None


_REGISTRY = []


def prepare():
    """Builds the exporter's table of ATen-to-ONNX functions once, in this process, before the
    export forks: onnxscript compiles its ~500 functions from source on every build (about 1 s,
    42 MB), which a child process would redo for each export. Uses torch's private exporter entry;
    a torch without it cannot be used (see _convert)."""
    if _REGISTRY:
        return _REGISTRY[0]
    try:
        from torch.onnx._internal.exporter import _core, _registration

        registry = _registration.ONNXRegistry.from_torchlib()
        for target in translations.decomposed():
            registry.functions.pop(target, None)
        for target, function in translations.table().items():
            registry.register_op(target, function)
        entry = (_core.export, registry)
    except (ImportError, AttributeError, TypeError):
        entry = (None, None)
    _REGISTRY.append(entry)
    return entry


def _convert(program):
    with timed_phase("the exporter's imports and registry"):
        core_export, registry = prepare()
    if core_export is not None:
        try:
            return core_export(program, (), None, registry=registry, optimize=False, verbose=False)
        except TypeError:  # another private signature: the public entry
            pass
    # The public entry cannot leave ops to decompose that torchlib translates otherwise than eager.
    raise ExportError(f"torch {torch.__version__}'s ONNX exporter has no entry that takes onnxtrain's translation "
                      "registry, without which its losses would differ from eager")


def _to_onnx(program, module):
    """The ONNX model of `program`, and the paths of the module tensors it takes as graph inputs."""
    import onnx

    buffer = io.StringIO()
    # The exporter prints its progress and logs its optimizations: neither is the user's business.
    quieted = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [q.level for q in quieted]
    for q in quieted:
        q.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_program = _convert(program)
    finally:
        for q, level in zip(quieted, levels):
            q.setLevel(level)
    params = _params_as_inputs(onnx_program.model.graph, module)
    return onnx.ModelProto.FromString(onnx_program.model_proto.SerializeToString()), params


def _params_as_inputs(graph, module):
    """The exporter stores parameters and buffers as initializers named module.<path>; the engine
    gets them as graph inputs (the front end feeds the module's own tensors). Lifted constants
    stay initializers. This runs on the exporter's IR, before it is serialized: serialized, each
    initializer would be copied into the proto, into its bytes and into the proto read back, all
    to be dropped (`bench/run --profile MODEL --first-steps` shows the export child's peak RSS)."""
    graph_inputs = []
    for name in list(graph.initializers):
        path = name[len(onnx_rewrites.PREFIX):] if name.startswith(onnx_rewrites.PREFIX) else None
        if path is None or not onnx_rewrites.is_module_tensor(module, path):
            continue
        value = graph.initializers.pop(name)
        if value.const_value is not None:  # the input's type and shape are the tensor's
            value.dtype = value.const_value.dtype
            value.shape = value.const_value.shape
        value.const_value = None
        graph.inputs.append(value)
        graph_inputs.append(path)
    return graph_inputs


def export_once(module, tensors, input_schema, training):
    empty = [i for i, t in enumerate(tensors) if 0 in t.shape]
    if empty:
        # torch.export fixes a dim of size 0 (and traces BatchNorm's running-statistics update
        # otherwise than eager runs it on an empty batch).
        raise ExportError(f"input {empty[0]} has an empty dim {tuple(tensors[empty[0]].shape)}, which the torch.export "
                          "capture does not trace")
    # torch.export traces fake tensors, whose kernels do not all check dtypes (a float64 input
    # through a float32 Linear traces): a call that eager refuses for its dtypes is refused here.
    with timed_phase("dtype check (an eager forward)"):
        dtype_error = diagnose_input_dtypes(module, tensors, input_schema, "")
    if dtype_error is not None:
        raise ExportError(str(dtype_error))
    flat = FlatModule(module, input_schema)
    flat.training = module.training  # only the wrapper's flag: a submodule in eval mode stays so
    args = tuple(t.detach() for t in tensors)
    dynamic = {"tensors": tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in args)}
    functions = {}
    try:
        program = _export_program(module, flat, args, tensors, dynamic, functions)
        return _finish(module, flat, program, args, tensors, input_schema, functions)
    finally:
        python_functions.forget(functions)


def _export_program(module, flat, args, tensors, dynamic, functions):
    """torch.export's program; a module with custom Functions is first run eagerly to probe them."""
    try:
        return _trace(module, flat, args, dynamic, functions, None)
    except refused.NeedsProbes:
        pass
    probes = []
    try:
        # The user's own tensors: a 0-d tensor that stands for a Python number is recognized
        # when it reaches a Function (which must then get the number: ScalarsMustBeBaked).
        with preserved_state(module), traced_as_in_training(module), refused.probed_functions(probes), \
                torch.no_grad():
            flat(*tensors)
    except refused.NotCapturable as e:
        raise ExportError(f"the torch.export capture does not export {type(module).__name__}: {e}") from None
    return _trace(module, flat, args, dynamic, functions, probes)


def _trace(module, flat, args, dynamic, functions, probes):
    error = None
    with preserved_state(module), traced_as_in_training(module), refused.traced_constructs(functions, probes):
        try:
            # Not size-oblivious (which the dynamo exporter uses for dims of size 1): onnxscript then
            # writes x.squeeze(1) as a Squeeze that fails for every other size. torch.export fixes
            # dims of size 0 and 1 instead, so a batch of 1 gets an export of its own.
            with timed_phase("torch.export"):
                program = torch.export.export(flat, args, dynamic_shapes=dynamic, strict=False)
        except Exception as e:  # noqa: BLE001 - every capture failure is reported the same way
            if _caused_by(e, refused.NeedsProbes):
                raise refused.NeedsProbes() from None
            error = f"torch.export.export failed for {type(module).__name__}: {type(e).__name__}: {_first_lines(e)}"
    if error is None:
        translations.detach_no_grad_blocks(program)
        translations.materialize_contiguous(program)
        try:
            refused.refuse_differing_ops(program)
        except refused.NotCapturable as e:
            error = f"the torch.export capture does not export {type(module).__name__}: {e}"
    if error is not None:
        raise ExportError(error)
    return program


def _finish(module, flat, program, args, tensors, input_schema, functions):
    ranges = _dim_ranges(program, len(tensors))
    try:
        with timed_phase("ONNX translation, in all"):
            model, params = _to_onnx(program, module)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"the dynamo ONNX exporter failed for {type(module).__name__}: {type(e).__name__}: "
                          f"{_first_lines(e)}") from None
    with timed_phase("onnxtrain's rewrites"):
        output_types.restore(model, output_types.traced_output_types(program))
        opset17.to_opset17(model)
        stubs.merge(model, onnx_rewrites.fresh_names(model),
                    lambda group: (python_functions.describe(group) or checkpoints.describe(group)
                                   or stubs.describe_engine_node(group)))
        num_user_inputs = len(model.graph.input) - len(params)  # the parameters come last
        num_user_outputs = len(model.graph.output)
        try:
            buffer_updates = onnx_rewrites.adapt_to_pytorch(model, module)
        except ValueError as e:
            raise ExportError(str(e)) from None
    graph_inputs = [("input", i) for i in range(num_user_inputs)] + [("param", p) for p in params]
    if num_user_inputs != len(tensors):
        # torch.export drops inputs the graph does not read; the engine is fed by position.
        raise ExportError(f"the ONNX export of {type(module).__name__} has {num_user_inputs} of its "
                          f"{len(tensors)} tensor inputs")
    scalars = _io.scalar_positions(input_schema)
    if scalars:
        # The forward saw fake tensors while torch.export traced: the traced outputs to compare
        # with eager's come from running the program.
        with preserved_state(module), traced_as_in_training(module):
            traced = program.module()(*args)
        flat.first_outputs = (flat.output_schema, [t.detach().clone() for t in traced])
    bakes_scalars = bool(scalars) and numbers_change_the_result(module, flat, tensors, input_schema)
    exported = Exported(model.SerializeToString(), graph_inputs, flat.output_schema, num_user_outputs, buffer_updates,
                        (), bakes_scalars, [i.name for i in model.graph.input], [o.name for o in model.graph.output],
                        any(n.op_type in RANDOM_OPS for n in model.graph.node), dict(functions))
    exported.dim_ranges = ranges
    exported.shape_guards = tuple(getattr(program, "_guards_code", None) or ())
    if not hasattr(program, "_guards_code"):
        raise ExportError(f"torch {torch.__version__}'s ExportedProgram does not list its shape guards, so "
                          "onnxtrain could not tell which input sizes the graph holds for")
    broken = exported.failed_guard(list(tensors))
    if broken is not None:
        raise ExportError(f"torch.export's shape guard {broken!r} cannot be checked on the example inputs")
    return exported


def _caused_by(error, kind):
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__
    return False


def _first_lines(error, lines=12):
    text = str(error).strip().splitlines()
    return "\n".join(text[:lines]) + ("\n..." if len(text) > lines else "")
