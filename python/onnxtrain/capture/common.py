"""What every capture backend shares: the Exported result and its errors, the flat view of a
module that tracers see, the state an export must leave as it was, the check of Python number
inputs, and the export driver (a cut-down batch first, in a forked child process)."""
import collections
import contextlib
import gc
import logging
import math
import os
import time

import torch

from .. import _C, _io, _objects

# The ops whose results are random draws, as their records in the engine declare them.
RANDOM_OPS = frozenset(_C.random_draw_ops())


# Seconds per phase of the export in progress in this process (timed_phase); _export hands them to
# its Exported as phase_seconds, which the parent logs.
_PHASE_SECONDS = collections.defaultdict(float)


@contextlib.contextmanager
def timed_phase(name):
    """Adds the time spent inside to the export's phase `name`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _PHASE_SECONDS[name] += time.perf_counter() - start


class ExportError(RuntimeError):
    """The capture backend could not export the module."""


class InputDtypeError(TypeError):
    """An input's dtype does not fit the module: raised, like eager raises, never a fallback."""


class ScalarsMustBeBaked(ExportError):
    """The module's code sees a Python number argument differently once it is a 0-d tensor (it
    checks the type, hands it to an autograd.Function, or computes another result): the number
    has to be baked into the export instead (see ortmodule)."""


def diagnose_input_dtypes(module, tensors, input_schema, export_error):
    """After a failed export: the InputDtypeError to raise when inputs have a dtype other than the
    one the module's floating parameters share and eager PyTorch fails on the same call too (so
    the call itself is wrong, not our export); otherwise None, and the fallback policy applies."""
    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    if len(dtypes) != 1:
        return None
    (expected,) = dtypes
    paths = _io.tensor_paths(input_schema)
    differing = [(paths[i] if i < len(paths) else f"input {i}", t.dtype) for i, t in enumerate(tensors)
                 if t.dtype != expected]
    if not differing:
        return None
    eager_error = _eager_error(module, tensors, input_schema)
    if eager_error is None:
        return None
    # Integer inputs are often indices; name them only when no floating input is to blame.
    blamed = [d for d in differing if d[1].is_floating_point] or differing
    listed = ", ".join(f"{path} is {str(dtype).replace('torch.', '')}" for path, dtype in blamed)
    return InputDtypeError(
        f"onnxtrain: {type(module).__name__} expects {str(expected).replace('torch.', '')} inputs (the dtype of its "
        f"parameters), but {listed}. Convert the input (for example x.to({expected})) or the module "
        f"(module.to(dtype)). Eager PyTorch fails on this call too: {eager_error}")


def _eager_error(module, tensors, input_schema):
    """What eager PyTorch raises on the user's own call (their tensors, and their Python numbers as
    numbers), or None; the module's buffers and the RNG are left as they were."""
    args, kwargs = _io.unflatten_inputs(input_schema, tensors, python_scalars=True)
    try:
        with preserved_state(module), torch.no_grad():
            module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any failure of the user's own call
        return f"{type(e).__name__}: {e}"
    return None


@contextlib.contextmanager
def replaced_function_apply(make_apply):
    """torch.autograd.Function.apply is make_apply(torch_apply) while the context lasts, where
    torch_apply(cls) is PyTorch's own apply bound to cls: the tracers would otherwise inline a
    Function's forward, and differentiating that would silently ignore the user's backward."""
    base = torch.autograd.Function
    had_own = "apply" in base.__dict__
    original = base.__dict__["apply"] if had_own else torch._C._FunctionBase.__dict__["apply"]
    base.apply = classmethod(make_apply(lambda cls: original.__get__(None, cls)))
    try:
        yield
    finally:
        if had_own:
            base.apply = original
        else:
            del base.apply


class BufferUpdates:
    """Extra graph outputs that carry new buffer values, and the BatchNorm modules they belong to."""

    def __init__(self):
        self.outputs = []  # (graph output index, buffer path)
        self.batchnorm_paths = []

    def __bool__(self):
        return bool(self.outputs)


class _Observed:
    output_schema = None
    first_outputs = None


class FlatModule(torch.nn.Module):
    """Takes and returns flat tensor tuples, so the ONNX graph has one input per tensor. Keeps
    what the first traced call saw and returned, for the check of Python number inputs."""

    def __init__(self, module, input_schema, traced_number=None):
        super().__init__()
        self.module = module
        # The capture's test of whether an output's 0-d integer tensor stands for a Python number
        # (a size the TorchScript tracer turned into a tensor): see _io._Flattener.attribute.
        self.traced_number = traced_number
        self.input_schema = input_schema
        self.scalar_positions = _io.scalar_positions(input_schema)
        self.number_attributes = _io.number_attributes(input_schema)
        self.traced_scalars = set()  # ids of the 0-d tensors the trace passed for Python numbers
        # Set on a plain object: torch.export undoes what the forward assigns to a module's
        # attributes, and to dicts and lists they hold.
        self.observed = _Observed()

    @property
    def output_schema(self):
        return self.observed.output_schema

    @property
    def first_outputs(self):
        return self.observed.first_outputs

    @first_outputs.setter
    def first_outputs(self, value):
        self.observed.first_outputs = value

    def forward(self, *tensors):
        self.traced_scalars.update(id(tensors[i]) for i in self.scalar_positions)
        input_objects = {}
        args, kwargs = _io.unflatten_inputs(self.input_schema, tensors, created_objects=input_objects)
        before = {key: _objects.snapshot(obj) for key, (_, obj) in input_objects.items()}
        out = self.module(*args, **kwargs)
        flat, self.observed.output_schema = _io.flatten_outputs(out, input_objects, self.number_attributes,
                                                                self.traced_number)
        _io.refuse_unreturned_changes(input_objects, before, self.observed.output_schema)
        if self.first_outputs is None and self.scalar_positions:
            self.first_outputs = (self.output_schema, [t.detach().clone() for t in flat])
        return tuple(flat)


@contextlib.contextmanager
def traced_as_in_training(module):
    """Grad enabled and every floating parameter requiring grad while the trace runs: PyTorch's
    eval-mode fast paths (nn.TransformerEncoderLayer, nn.MultiheadAttention) are taken only
    without them, and they call fused kernels that have no ONNX export."""
    frozen = [p for p in module.parameters() if not p.requires_grad and p.is_floating_point()]
    try:
        for p in frozen:
            p.requires_grad_(True)
        with torch.enable_grad():
            yield
    finally:
        for p in frozen:
            p.requires_grad_(False)


@contextlib.contextmanager
def preserved_state(module):
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


def numbers_change_the_result(module, flat, tensors, input_schema):
    """Whether the module, called eagerly with its Python number arguments as the numbers they are,
    returns anything else than the trace computed with them as 0-d tensors: code that checks a
    number's type, or computes with it in another precision, does. Runs from the state the trace
    started from (buffers and RNG, which preserved_state restored), so Dropout draws the same."""
    if flat.first_outputs is None:
        return False
    traced_schema, traced = flat.first_outputs
    input_objects = {}
    args, kwargs = _io.unflatten_inputs(input_schema, tensors, python_scalars=True, created_objects=input_objects)
    try:
        with preserved_state(module), traced_as_in_training(module):
            out = module(*args, **kwargs)
        flat_out, out_schema = _io.flatten_outputs(out, input_objects, flat.number_attributes)
    except Exception:  # noqa: BLE001 - eager fails where the trace did not: the numbers matter
        return True
    if out_schema != traced_schema:
        return True
    for eager, seen in zip(flat_out, traced):
        try:
            torch.testing.assert_close(eager.detach(), seen, rtol=0, atol=0, equal_nan=True)
        except AssertionError:
            return True
    return False


class Exported:
    """An exported graph and how its inputs and outputs map to the module's."""

    def __init__(self, model_bytes, graph_inputs, output_schema, num_user_outputs, buffer_updates,
                 trace_warnings=(), bakes_scalars=False, input_names=(), output_names=(), has_randomness=False,
                 python_functions=None):
        self.model_bytes = model_bytes
        # function_key -> _python_op.FunctionSpec of every PythonOp node (custom autograd.Functions).
        self.python_functions = dict(python_functions or {})
        # Names of the graph's inputs and outputs, and whether it draws random numbers (Dropout).
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.has_randomness = has_randomness
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
        self.shrunk = False  # traced on a cut-down batch (see trace_inputs)
        # Per flat input, per dim, (lowest, highest or None) that the graph holds for; None: every
        # size (the TorchScript exporter's graphs; torch.export fixes sizes the code depends on).
        self.dim_ranges = None
        # torch.export's guards on the inputs' sizes (Python expressions over L['tensors'][i]):
        # relations between dims (x.shape[1] * x.shape[2] == 12) the graph assumes.
        self.shape_guards = ()
        # Seconds per phase of the export (timed_phase), and "whole": where the export's time went.
        self.phase_seconds = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_compiled_guards", None)  # code objects do not pickle; compiled again on use
        return state

    def _guards(self):
        compiled = self.__dict__.get("_compiled_guards")
        if compiled is None:
            compiled = [(text, compile(text, "<torch.export guard>", "eval")) for text in self.shape_guards]
            self.__dict__["_compiled_guards"] = compiled
        return compiled

    def failed_guard(self, tensors):
        """The first shape guard that these inputs break (or that cannot be evaluated), or None."""
        scope = {"L": {"tensors": tensors}}
        for text, code in self._guards():
            try:
                # torch's own guard code: sizes, arithmetic, math.* and torch.sym_max and the like.
                holds = bool(eval(code, {"__builtins__": {}, "math": math, "torch": torch}, scope))  # noqa: S307
            except Exception:  # noqa: BLE001 - a guard that cannot be checked does not hold
                holds = False
            if not holds:
                return text
        return None

    def sizes_may_be_baked(self):
        """Whether the tracer warned in the module's own code (not torch's): a size or value it
        read as a Python number is then a constant of the graph, which other sizes can break."""
        return any(from_user_code for _, from_user_code in self.trace_warnings)

    def misfit(self, tensors):
        """None if the graph holds for these inputs' sizes, else why not."""
        guard = self.failed_guard(tensors) if self.shape_guards else None
        if guard is not None:
            return f"the inputs' sizes break the condition {guard} under which torch.export made the graph"
        if self.dim_ranges is None:
            return None
        for i, (t, dims) in enumerate(zip(tensors, self.dim_ranges)):
            for d, (lowest, highest) in enumerate(dims):
                size = t.shape[d]
                if size < lowest or (highest is not None and size > highest):
                    held = f"{lowest}" if lowest == highest else f"{lowest} to {highest if highest is not None else 'any'}"
                    return (f"input {i} has size {size} in dim {d}, and torch.export made the graph for sizes {held} "
                            "there")
        return None


# The trace runs the module's forward on the example inputs, so a large batch makes the first
# step slow for nothing: every dim is exported dynamic. The trace takes this many samples.
TRACE_BATCH = 2


def trace_inputs(tensors):
    """The example inputs cut to TRACE_BATCH samples when every tensor input shares a leading
    batch dim larger than that; otherwise the inputs themselves."""
    leading = {t.shape[0] for t in tensors if t.dim() >= 1}
    if not tensors or len(leading) != 1 or any(t.dim() == 0 for t in tensors):
        return tensors, False
    (batch,) = leading
    if batch <= TRACE_BATCH:
        return tensors, False
    return [t[:TRACE_BATCH] for t in tensors], True


def export(export_once, module, tensors, input_schema, training, full_trace=False):
    """Exports with `export_once` (a backend's export_once(module, tensors, input_schema, training)
    -> Exported) in a forked child process when possible: the exporter's own memory (its code and
    the traced graphs, about 15 MB) then never adds to this process's footprint, and the child's
    side effects (the trace runs the module's forward) vanish with it. ONNXTRAIN_EXPORT_IN_PROCESS=1
    exports here instead; so does anything the child cannot send back (a locally defined output
    class)."""
    pending = start_export_in_child(export_once, module, tensors, input_schema, training, full_trace)
    if pending is not None:
        result = pending.wait()
        if result is not None:
            return result
    return _export(export_once, module, tensors, input_schema, training, full_trace)


def exports_in_child():
    """Whether exports run in a forked child here (see export)."""
    return hasattr(os, "fork") and os.environ.get("ONNXTRAIN_EXPORT_IN_PROCESS", "0") in ("", "0")


def autograd_runs():
    """Whether torch's autograd can run a backward in this process. It cannot in a child forked
    after the parent's autograd engine started threads of its own: its device threads, which it
    starts at the process's first backward for every device it counts (torch.export's fake tensors
    make CUDA count devices even without a GPU), or a thread for a reentrant backward nested past
    its depth limit. There every backward raises "Unable to handle autograd's threading in
    combination with fork-based multiprocessing"."""
    try:
        with torch.inference_mode(False), torch.enable_grad():
            x = torch.zeros((), requires_grad=True)
            torch.autograd.grad(x * 2, x)
        return True
    except RuntimeError:
        return False


class PendingExport:
    """An export running in a forked child. wait() (from any thread) returns its Exported, raises
    its ExportError, or returns None when the child could not export or answer: it could not run
    autograd, which the probe of each custom autograd.Function needs (its backward tells which
    inputs get no gradient), or its result does not pickle. The caller then exports in its own
    process."""

    def __init__(self, pid, read_end):
        self.pid = pid
        self._read_end = read_end

    def wait(self):
        import pickle

        with os.fdopen(self._read_end, "rb") as f:
            data = f.read()
        os.waitpid(self.pid, 0)
        try:
            kind, value = pickle.loads(data)
        except Exception:  # noqa: BLE001 - the child died before answering
            return None
        if kind == "error":
            raise ExportError(value)
        if kind == "no_autograd":
            logging.getLogger("onnxtrain").info(
                "onnxtrain: autograd cannot run in a child forked from this process (torch's autograd engine "
                "started threads here), so the module is exported in this process")
        return value if kind == "ok" else None


def start_export_in_child(export_once, module, tensors, input_schema, training, full_trace=False):
    """Forks a child that runs _export and returns its PendingExport, or None where exports do not
    run in a child (exports_in_child). The fork copies the module as it is now: call it between the
    module's calls."""
    import pickle

    if not exports_in_child():
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: export, send the pickled outcome, leave without cleanup handlers
        try:
            # A collection would write to every object's header, copying the parent's pages one
            # fault at a time; the child lives for one export, so it never collects.
            gc.disable()
            os.close(read_end)
            torch.set_num_threads(1)  # OpenMP's thread pool does not survive fork
            try:
                if autograd_runs():
                    outcome = ("ok", _export(export_once, module, tensors, input_schema, training, full_trace))
                else:
                    outcome = ("no_autograd", None)
            except ExportError as e:
                outcome = ("error", str(e))
            try:
                data = pickle.dumps(outcome)
            except Exception:  # noqa: BLE001 - unpicklable output types: the parent exports itself
                data = pickle.dumps(("unpicklable", None))
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write_end)
    return PendingExport(pid, read_end)


def _export(export_once, module, tensors, input_schema, training, full_trace=False):
    """Exports `module` called on the inputs described by (tensors, input_schema). The trace first
    runs on a cut-down batch; it is redone at full size when the user's code made it warn (a
    branch or a Python number taken from the data, which a smaller batch could change)."""
    _PHASE_SECONDS.clear()
    start = time.perf_counter()
    small, shrunk = trace_inputs(tensors)
    exported = None
    if shrunk and not full_trace:
        try:
            exported = export_once(module, small, input_schema, training)
        except ExportError:
            exported = None  # e.g. a shape written for the real batch: the full trace decides
        if exported is not None and any(user for _, user in exported.trace_warnings):
            exported = None
        elif exported is not None:
            exported.shrunk = True
    if exported is None:
        exported = export_once(module, tensors, input_schema, training)
    exported.phase_seconds = dict(_PHASE_SECONDS, whole=time.perf_counter() - start)
    return exported
