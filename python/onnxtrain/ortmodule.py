"""ORTModule: wrap a torch.nn.Module so that its forward and backward run in onnxtrain."""
import collections
import functools
import inspect
import logging
import time
import types
import warnings

import torch

from . import _C, _cache, _eager_warmup, _io, profiler
from ._autograd import ORTModuleFunction
from ._compile import opaque_to_torch_compile, unwrap_compiled
from ._engine import Graphs
from .capture import TRACE_BATCH, BackgroundExport, ExportError, diagnose_input_dtypes, export
from ._logging import apply_log_level, logger
from ._module_state import ModuleState
from ._options import DebugOptions, fallback_enabled

# Failures that the fallback policy covers: the module cannot be exported, or the engine lacks an
# op. Errors in the user's inputs (shapes, dtypes) always raise.
_FALLBACK_ERRORS = (ExportError, _io.UnsupportedTypeError, _C.UnsupportedError)

# Attributes that belong to the wrapper itself; every other attribute set on an ORTModule after its
# construction goes to the wrapped module, as ONNX Runtime's ORTModule does.
_WRAPPER_ATTRIBUTES = frozenset({
    "_original_module", "_debug_options", "_graphs", "_fallback_reason", "_scalars_as_tensors", "engine_runs",
    "_last_variant", "_warmup", "eager_warmup_runs",
    "forward", "_forward_signature", "_warned_string_inputs", "_pending_load_report"})
# The prefix the wrapped module's state has inside torch's own recursion (load_state_dict).
_INNER = "_original_module."


class _ParamLookup:
    """Finds a parameter or buffer by its dotted name on every call, cheaply, so that replaced
    parameters and reassigned buffers are always the ones fed to the engine."""

    def __init__(self, module, names):
        self._slots = []
        for name in names:
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            self._slots.append((owner, attr, name))

    def tensors(self):
        out = []
        for owner, attr, name in self._slots:
            t = owner._parameters.get(attr)
            if t is None:
                t = owner._buffers.get(attr)
            if t is None:
                raise RuntimeError(f"onnxtrain: parameter or buffer {name!r} disappeared from the module")
            out.append(t)
        return out


class ORTModule(torch.nn.Module):
    """Runs `module` through onnxtrain's engine.

    The module is exported to ONNX on the first call, and again only when the input structure
    (containers, keys, None, bools, strings), a tensor's dtype or rank, or the train/eval mode
    changes, or an attribute the trace may have baked in (see _module_state). Batch and sequence
    lengths, and the values of int and float arguments, change freely.

    While an export and its graphs are made, the calls that need them run in eager PyTorch (the
    eager warm-up, see _eager_warmup; `eager_warmup_runs` counts them, `engine_runs` the calls the
    engine ran); DebugOptions(eager_warmup=False) or ONNXTRAIN_EAGER_WARMUP=0 makes the call wait
    for its capture instead.

    It stands in for the module: forward has its signature, state_dict keys and named_parameters
    are its own (also when nested in another module), and attributes set on the wrapper are set on
    the module.
    """

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions = None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        if debug_options is not None and not isinstance(debug_options, DebugOptions):
            raise TypeError(f"ORTModule(debug_options=...) takes a DebugOptions, got {type(debug_options).__name__}")
        module = unwrap_compiled(module)
        self._original_module = module
        self._debug_options = debug_options or DebugOptions()
        apply_log_level(self._debug_options.log_level)
        if self._debug_options.plan_cache_mb is not None:
            _C.set_arena_budget(self._debug_options.plan_cache_mb << 20)
        if self._debug_options.buffer_cache_mb is not None:
            _C.set_buffer_cache_limit(self._debug_options.buffer_cache_mb << 20)
        if self._debug_options.profile_path:
            profiler.start(self._debug_options.profile_path)
        # In a nested load_state_dict, torch's recursion reports the wrapped module's keys with the
        # wrapper's prefix: this hook names them as the plain module would (see _load_from_state_dict).
        self.register_load_state_dict_post_hook(_report_plain_keys)
        self._reset_state()

    def _reset_state(self):
        # (training, input schema, tensor signature) -> (Graphs, _ParamLookup, ModuleState), least
        # recently used first; bounded by DebugOptions.max_cached_graphs.
        self._graphs = collections.OrderedDict()
        self._fallback_reason = None
        self._scalars_as_tensors = True  # False once an export baked a Python number in
        self._last_variant = {}  # call structure -> the variant of its export that ran last
        self._warned_string_inputs = False
        self.engine_runs = 0  # forward calls the engine served: tests use it to prove no fallback
        # Calls that ran in eager PyTorch while their capture went on (see _eager_warmup).
        self.eager_warmup_runs = 0
        self._warmup = _eager_warmup.EagerWarmup() if _eager_warmup.enabled(
            self._debug_options.eager_warmup) else None
        self._install_forward_signature()

    def _install_forward_signature(self):
        """Gives this instance a forward with the wrapped module's signature and docstring, so that
        inspect.signature(model.forward) (which Hugging Face's Trainer reads to pick the batch's
        columns, for one) sees the user's parameters; the call goes to the class's forward."""
        original = self._original_module.forward
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):  # a forward whose signature Python cannot tell
            self._forward_signature = None
            return
        self._forward_signature = signature

        def forward(self, *args, **kwargs):
            return type(self).forward(self, *args, **kwargs)

        functools.update_wrapper(forward, original, updated=())
        wrapper = inspect.Parameter("__ortmodule", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = signature.replace(parameters=[wrapper, *signature.parameters.values()])
        object.__setattr__(self, "forward", types.MethodType(forward, self))

    @property
    def module(self):
        return self._original_module

    # ---- calls ----

    @opaque_to_torch_compile
    def forward(self, *args, **kwargs):
        if self._fallback_reason is not None:
            return self._original_module(*args, **kwargs)
        flat = prepared = None
        if self._warmup is not None:
            flat, prepared = self._warmup_step(args, kwargs)
            if prepared is _eager_warmup.EAGER:
                return self._run_eagerly(args, kwargs)
        try:
            graphs, params, tensors = self._graphs_for(args, kwargs, flat=flat, prepared=prepared)
            feeds = self._feeds(graphs, params, tensors)
            self.__dict__["engine_runs"] += 1
            try:
                outputs = self._run(graphs, feeds, tensors)
            except _C.ExportMismatchError as e:
                mismatch = str(e)
                del e
                graphs, outputs = self._run_fitting_export(args, kwargs, graphs, mismatch)
            except _C.EngineError as e:
                if isinstance(e, _C.UnsupportedError):
                    raise
                if graphs.exported.sizes_may_be_baked():
                    # The trace warned in the module's code (a size it read as a Python number, as
                    # HF's mask code does under TorchScript): a graph for these sizes is exported.
                    reason = f"the graph its trace warned about failed at these sizes ({e})"
                    del e
                    graphs, outputs = self._run_fitting_export(args, kwargs, graphs, reason)
                elif not graphs.exported.shrunk or graphs.proven:
                    raise
                else:
                    # The graph traced on a small batch does not hold at full size (a hard-coded shape,
                    # say): export again from the real inputs.
                    logger.info("onnxtrain: the graph traced on %d samples failed at full size (%s); exporting "
                                "again from the full inputs", TRACE_BATCH, e)
                    del e
                    graphs, params, tensors = self._graphs_for(args, kwargs, full_trace=True)
                    feeds = self._feeds(graphs, params, tensors)
                    outputs = self._run(graphs, feeds, tensors)
            graphs.proven = True
        except _FALLBACK_ERRORS as e:
            reason = str(e)
            del e
            return self._fall_back(reason, args, kwargs)
        outputs = graphs.apply_buffer_updates(self._original_module, outputs)
        return _io.unflatten_outputs(graphs.exported.output_schema, list(outputs), (args, kwargs))

    @staticmethod
    def _feeds(graphs, params, tensors):
        """The graph's inputs in order: the user's tensors and the module's parameters and buffers."""
        feeds = [tensors[ref] if kind == "input" else None for kind, ref in graphs.exported.graph_inputs]
        param_iter = iter(params.tensors())
        feeds = [t if t is not None else next(param_iter) for t in feeds]
        return [t if t.is_contiguous() else t.contiguous() for t in feeds]

    @staticmethod
    def _run(graphs, feeds, tensors):
        misfit = graphs.exported.misfit(tensors)
        if misfit is not None:  # torch.export fixed a size these inputs do not have
            raise _C.ExportMismatchError(misfit)
        if torch.is_grad_enabled() and any(t.requires_grad for t in feeds):
            run = graphs.training_run(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
            return ORTModuleFunction.apply(run, *feeds)
        return graphs.infer(feeds)

    def _warmup_step(self, args, kwargs):
        """(what _graphs_for needs of this call, already computed: its tensors, schema, graphs key
        and its graphs when they exist and still fit the module; or None), and what the eager
        warm-up decides for it: EAGER, a finished capture for _graphs_for to take, or None."""
        try:
            tensors, schema = _io.flatten_inputs(args, kwargs, self._scalars_as_tensors)
        except _io.UnsupportedTypeError:
            return None, None  # _graphs_for raises it again, where the fallback policy decides
        call = (self._original_module.training, schema, _io.call_signature(tensors))
        key = call + (self._last_variant.get(call, 0),)
        entry = self._graphs.get(key)
        has_graphs = entry is not None and entry[2].unchanged()

        def start_job():
            self._check_call(args, kwargs, schema)
            return self._start_background_capture(key, tensors, schema)

        decision = self._warmup.before_call(key, has_graphs, start_job)
        while self._warmup.finished:  # another call structure's capture, done while its calls were away
            job = self._warmup.finished.pop()
            if job.exported is not None and not (job.exported.bakes_scalars and self._scalars_as_tensors):
                self._build(job.key, None, job.key[1], job.key[0], prepared=job)
        return (tensors, schema, key, entry if has_graphs else None), decision

    def _start_background_capture(self, key, tensors, schema):
        """The WarmupJob that captures this call beside the eager calls, or None where it cannot
        (a variant of a call structure, or no forked export here): the call then captures blocking."""
        if key[3] != 0:
            return None
        training = key[0]
        cache_key = cached = None
        if _cache.directory():
            cache_key = _cache.key(self._original_module, training, schema, key[2])
            cached = _cache.load(cache_key)
        export_job = None
        if cached is None:
            export_job = BackgroundExport(self._original_module, tensors, schema, training)
            if export_job.in_process:
                return None
        grad_call = torch.is_grad_enabled()
        input_requires_grad = [t.requires_grad and t.is_floating_point() for t in tensors]
        name = type(self._original_module).__name__
        module, options = self._original_module, self._debug_options

        def build(exported, export_seconds):  # on the job's thread
            graphs = Graphs(exported, name, training, options, export_seconds)
            params = _ParamLookup(module, [ref for kind, ref in exported.graph_inputs if kind == "param"])
            if grad_call:
                feeds = self._feeds(graphs, params, tensors)
                requires_grad = tuple(t.requires_grad and t.is_floating_point() if kind == "param" else
                                      input_requires_grad[ref] for t, (kind, ref) in zip(feeds, exported.graph_inputs))
                if any(requires_grad):
                    # Not run here: a run beside the eager steps would hold the engine's memory and
                    # theirs at once (resnet50: 2.9 GB against eager's 1.95).
                    graphs.training_run(requires_grad)
            return graphs, params

        job = _eager_warmup.WarmupJob(key, export_job, build, cached)
        job.cache_key = cache_key
        logger.info("onnxtrain: capturing %s in the background; its calls run in eager PyTorch until the engine's "
                    "graphs are ready", name)
        return job

    def _run_eagerly(self, args, kwargs):
        self.__dict__["eager_warmup_runs"] += 1
        _eager_warmup.STATISTICS["eager_warmup_calls"] += 1
        outputs = self._original_module(*args, **kwargs)
        job = self._warmup.job
        if job is not None and job.state is None:
            # After the first eager call, as after an export in this process: what the forward sets on
            # its first call (a lazily built cache) is not a change to export again for.
            job.state = ModuleState(self._original_module)
        return outputs

    def _forget_graphs(self):
        """The module changed in a way the exports may have baked in: every graph, and any capture in
        progress, goes."""
        self._graphs.clear()
        warmup = self.__dict__.get("_warmup")
        if warmup is not None:
            warmup.forget()

    def _graphs_for(self, args, kwargs, full_trace=False, variant=None, flat=None, prepared=None):
        """The graphs for this call, exported if need be. A call's graphs are keyed by (mode, input
        schema, tensor signature, variant): variants are exports of one call structure whose pieces
        differ (see _run_fitting_export); the one that ran last is tried first. `flat` is what
        _warmup_step found for this call (its graphs checked once per call, not twice); `prepared` a
        finished WarmupJob for this call."""
        checked = None
        if flat is not None and variant is None:
            tensors, schema, key, checked = flat
        else:
            tensors, schema = _io.flatten_inputs(args, kwargs, self._scalars_as_tensors)
            call = (self._original_module.training, schema, _io.call_signature(tensors))
            key = call + (self._last_variant.get(call, 0) if variant is None else variant,)
        training = key[0]
        if checked is not None and not full_trace and self._graphs.get(key) is checked:
            self._graphs.move_to_end(key)
            return checked[0], checked[1], tensors
        entry = None if full_trace else self._graphs.get(key)
        if entry is not None and not entry[2].unchanged():
            logger.info("onnxtrain: an attribute or submodule of %s changed since its export; exporting again",
                        type(self._original_module).__name__)
            del self._graphs[key]
            entry = None
        if entry is not None:
            self._graphs.move_to_end(key)
        else:
            self._check_call(args, kwargs, schema)
            numbers_as_tensors = self._scalars_as_tensors and bool(_io.scalar_positions(schema))
            try:
                entry = self._build(key, tensors, schema, training, full_trace,
                                    prepared if prepared is not None and prepared.key == key else None)
            except ExportError as e:
                if not numbers_as_tensors:
                    raise
                return self._bake_numbers(args, kwargs, f"its export with them as 0-d tensors failed ({e})")
            if entry[0].exported.bakes_scalars and self._scalars_as_tensors:
                return self._bake_numbers(args, kwargs, "it uses them as constants, or its code treats them otherwise "
                                          "than 0-d tensors")
        graphs, params, _ = entry
        return graphs, params, tensors

    def _ready_graphs(self, args, kwargs):
        """(graphs, parameter lookup, input tensors) of this call when an earlier call ran the same
        graphs through the engine and nothing invalidated them since (no export, retry or
        fallback to expect); None otherwise. For onnxtrain.TrainStep's whole step."""
        if self._fallback_reason is not None:
            return None
        try:
            tensors, schema = _io.flatten_inputs(args, kwargs, self._scalars_as_tensors)
        except _io.UnsupportedTypeError:
            return None
        call = (self._original_module.training, schema, _io.call_signature(tensors))
        key = call + (self._last_variant.get(call, 0),)
        entry = self._graphs.get(key)
        if entry is None or not entry[0].proven or not entry[2].unchanged() or entry[0].exported.misfit(tensors):
            return None
        self._graphs.move_to_end(key)
        return entry[0], entry[1], tensors

    def _bake_numbers(self, args, kwargs, why):
        """From now on the module's Python number arguments are baked into its exports as the
        numbers they are, so each value gets its own export, as correctness requires."""
        logger.info("onnxtrain: %s takes Python numbers as they are, since %s; numbers now key the export",
                    type(self._original_module).__name__, why)
        self._scalars_as_tensors = False
        self._forget_graphs()
        self._last_variant.clear()
        return self._graphs_for(args, kwargs)

    def _run_fitting_export(self, args, kwargs, failed, mismatch):
        """The engine refused `failed` for these inputs: a chunk, split or unbind makes other
        pieces at their sizes than at the trace's (SplitGuard), or a size the trace baked in does
        not hold. Runs the call on another export of
        the same call structure that fits, or on a new one traced from these inputs, which is kept
        beside the others (a last, smaller batch alternates with the full ones)."""
        tensors, schema = _io.flatten_inputs(args, kwargs, self._scalars_as_tensors)
        call = (self._original_module.training, schema, _io.call_signature(tensors))
        if failed.exported.shrunk and not failed.proven:  # traced on a cut-down batch: never fit
            for key in [k for k, v in self._graphs.items() if v[0] is failed]:
                del self._graphs[key]
        for key in [k for k, v in self._graphs.items() if k[:3] == call and v[0] is not failed]:
            graphs, params, state = self._graphs[key]
            if not state.unchanged():
                continue
            try:
                outputs = self._run(graphs, self._feeds(graphs, params, tensors), tensors)
            except _C.ExportMismatchError:
                continue
            except _C.EngineError as e:
                if isinstance(e, _C.UnsupportedError) or not graphs.exported.sizes_may_be_baked():
                    raise
                continue
            self._graphs.move_to_end(key)
            self._last_variant[call] = key[3]
            return graphs, outputs
        variant = max([k[3] for k in self._graphs if k[:3] == call], default=-1) + 1
        logger.info("onnxtrain: %s: %s; exporting again from these inputs", type(self._original_module).__name__,
                    mismatch)
        graphs, params, tensors = self._graphs_for(args, kwargs, full_trace=True, variant=variant)
        self._last_variant[call] = variant
        return graphs, self._run(graphs, self._feeds(graphs, params, tensors), tensors)

    def _check_call(self, args, kwargs, schema):
        """Before an export: a call the forward cannot take raises TypeError, as eager does, rather
        than failing inside the exporter; and strings, which the export bakes in, are pointed out
        once."""
        name = type(self._original_module).__name__
        if self._forward_signature is not None:
            try:
                self._forward_signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{name}.forward() {e}") from None
        if not self._warned_string_inputs:
            strings = _string_arguments(schema)
            if strings:
                self._warned_string_inputs = True
                warnings.warn(
                    f"onnxtrain: {name}.forward received a str ({', '.join(strings)}); the export bakes each "
                    "string into the graph as a constant, so every distinct string value exports the module "
                    "again. Pass tensors, or few distinct strings.", UserWarning, stacklevel=6)

    def _build(self, key, tensors, schema, training, full_trace=False, prepared=None):
        """Exports this call (or takes `prepared`'s export, a finished WarmupJob's) and keeps its
        graphs under `key`, evicting the least recently used past DebugOptions.max_cached_graphs."""
        name = type(self._original_module).__name__
        start = time.perf_counter()
        if prepared is not None and prepared.in_process:
            prepared = None  # its child could not export: this process does, as export() would
        if prepared is not None and prepared.error is not None:
            self._raise_export_error(prepared.error, tensors, schema)
        cache_key = None
        exported = None
        fresh = True  # exported now (here or beside the eager calls), not loaded from the cache
        if prepared is not None:
            exported, cache_key = prepared.exported, None if prepared.from_cache else prepared.cache_key
            fresh = not prepared.from_cache
            export_seconds = prepared.export_seconds
        elif _cache.directory():
            # Variant 0 keeps the key of a call structure's first export; later ones have their own.
            cache_key = _cache.key(self._original_module, training, schema, key[2] if key[3] == 0 else key[2:])
            exported = None if full_trace else _cache.load(cache_key)
            if exported is not None:
                cache_key, fresh = None, False
                logger.info("onnxtrain: loaded the %s export of %s from the cache", "train" if training else "eval",
                            name)
        if exported is None:
            try:
                exported = export(self._original_module, tensors, schema, training, full_trace)
            except ExportError as e:
                self._raise_export_error(e, tensors, schema)
        if fresh:
            for message, from_user_code in exported.trace_warnings:
                logger.log(logging.WARNING if from_user_code else logging.DEBUG,
                           "onnxtrain: exporting %s: the tracer warns that the graph may not generalize: %s",
                           name, message)
        if cache_key is not None:
            _cache.store(cache_key, exported)
        if prepared is not None and prepared.built is not None:
            graphs, params = prepared.built
        else:
            if prepared is None:
                export_seconds = time.perf_counter() - start
            graphs = Graphs(exported, name, training, self._debug_options, export_seconds)
            params = _ParamLookup(self._original_module,
                                  [ref for kind, ref in exported.graph_inputs if kind == "param"])
        # Taken after the export: an export in this process runs the forward, which may set attributes.
        state = prepared.state if prepared is not None and prepared.state is not None else \
            ModuleState(self._original_module)
        if prepared is not None:
            logger.info("onnxtrain: %s switches from eager PyTorch to the engine after %.1f s of capture beside "
                        "%d eager calls", name, time.perf_counter() - prepared.started, self.eager_warmup_runs)
            _eager_warmup.return_freed_memory()
        self._graphs[key] = (graphs, params, state)
        self._graphs.move_to_end(key)
        while len(self._graphs) > self._debug_options.max_cached_graphs:
            evicted, _ = self._graphs.popitem(last=False)
            if not any(k[:3] == evicted[:3] for k in self._graphs):
                self._last_variant.pop(evicted[:3], None)
            logger.info("onnxtrain: %s keeps %d graphs (DebugOptions.max_cached_graphs); dropping the least "
                        "recently used", name, self._debug_options.max_cached_graphs)
        return self._graphs[key]

    def _raise_export_error(self, error, tensors, schema):
        """Raises an export's error, or the clearer one that the inputs' dtypes explain it."""
        dtype_error = None if tensors is None else diagnose_input_dtypes(self._original_module, tensors, schema,
                                                                          str(error))
        if dtype_error is not None:
            raise dtype_error from None
        raise error

    def _fall_back(self, reason, args, kwargs):
        if not fallback_enabled():
            raise RuntimeError(f"onnxtrain cannot run {type(self._original_module).__name__}: {reason} "
                               "(ONNXTRAIN_FALLBACK=0, so there is no fallback to PyTorch)")
        message = (f"onnxtrain: falling back to PyTorch for {type(self._original_module).__name__}: {reason}. "
                   "Set ONNXTRAIN_FALLBACK=0 to raise instead.")
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        logger.warning(message)
        self._fallback_reason = reason
        return self._original_module(*args, **kwargs)

    @property
    def fallback_reason(self):
        """Why this module runs in PyTorch instead of the engine, or None."""
        return self._fallback_reason

    # ---- the wrapped module's API, without a wrapper prefix ----
    # Names (state_dict keys, named_parameters, named_modules) are the plain module's, at the top
    # level and nested inside another module, so that a state_dict moves freely between a model
    # with ORTModule and one without. The wrapper itself is not among named_modules(), as in ONNX
    # Runtime; children() still yields the wrapped module, so that torch's own traversals (train,
    # apply, to) reach it.

    def state_dict(self, *args, **kwargs):
        # Also the call torch's recursion makes when this module is nested (destination, prefix).
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self._original_module.load_state_dict(state_dict, strict)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Reached only when an enclosing module loads a state_dict (ours hands it straight to the wrapped
        # module). torch's recursion goes on into self._modules, where the wrapped module's keys are
        # prefix + "_original_module.": the plain keys are renamed so here, in this module's own copy
        # of its part of the state_dict, and _report_plain_keys renames what torch reports back. Keys
        # that already carry the inner prefix (saved by an older onnxtrain) load as they are.
        inner = prefix + _INNER
        for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
            state_dict[inner + key[len(prefix):]] = state_dict.pop(key)
        self._pending_load_report = (prefix, error_msgs, len(error_msgs))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        return self._original_module.named_modules(memo, prefix, remove_duplicate)

    def named_parameters(self, prefix="", recurse=True, **kwargs):
        return self._original_module.named_parameters(prefix=prefix, recurse=recurse, **kwargs)

    def parameters(self, recurse=True):
        return self._original_module.parameters(recurse=recurse)

    def named_buffers(self, prefix="", recurse=True, **kwargs):
        return self._original_module.named_buffers(prefix=prefix, recurse=recurse, **kwargs)

    def buffers(self, recurse=True):
        return self._original_module.buffers(recurse=recurse)

    def register_buffer(self, name, tensor, persistent=True):
        self._original_module.register_buffer(name, tensor, persistent)
        self._forget_graphs()  # the forward may now read it

    def register_parameter(self, name, param):
        if "_original_module" not in self._modules:  # during nn.Module's own __init__
            return super().register_parameter(name, param)
        self._original_module.register_parameter(name, param)
        self._forget_graphs()

    def add_module(self, name, module):
        if "_original_module" not in self._modules or name == "_original_module":
            return super().add_module(name, module)
        self._original_module.add_module(name, module)
        self._forget_graphs()

    register_module = add_module

    def _apply(self, fn):
        # .to(), .double(), .half(), ...: new dtypes or devices need new graphs.
        result = super()._apply(fn)
        self._forget_graphs()
        return result

    def __setattr__(self, name, value):
        if name in _WRAPPER_ATTRIBUTES or name in self.__dict__ or "_original_module" not in self.__dict__.get(
                "_modules", ()):
            super().__setattr__(name, value)
            if name == "_original_module" and "_graphs" in self.__dict__:
                self._reset_state()
            return
        setattr(self._original_module, name, value)
        # The forward may read it: the graphs exported so far may bake in the old value. (Dropping
        # them is what a generation counter in the cache key would do, without keeping the dead
        # graphs until the LRU evicts them.)
        self._forget_graphs()

    def __delattr__(self, name):
        if name in _WRAPPER_ATTRIBUTES or name in self.__dict__ or name in self._modules:
            return super().__delattr__(name)
        delattr(self._original_module, name)
        self._forget_graphs()

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._original_module)))

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            pass
        original = super().__getattr__("_original_module")
        value = getattr(original, name)
        # A method the user defined on the wrapped module runs with `self` being this wrapper, so
        # that its self(...) calls go through the engine.
        if isinstance(value, types.MethodType) and value.__self__ is original and \
                not hasattr(torch.nn.Module, name):
            return types.MethodType(value.__func__, self)
        return value

    # ---- pickling and copying: the engine's graphs are rebuilt on the next call ----

    def __getstate__(self):
        state = self.__dict__.copy()
        for transient in ("_graphs", "_last_variant", "_fallback_reason", "_scalars_as_tensors", "_warned_string_inputs",
                          "engine_runs", "eager_warmup_runs", "_warmup", "forward", "_forward_signature",
                          "_pending_load_report"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_state()


def _report_plain_keys(module, incompatible_keys):
    """load_state_dict post-hook of an ORTModule: after an enclosing module's load, names the missing
    and unexpected keys and the error messages of the wrapped module's part as the plain module's."""
    pending = module.__dict__.pop("_pending_load_report", None)
    if pending is None:
        return
    prefix, error_msgs, first = pending
    inner = prefix + _INNER

    def plain(key):
        return prefix + key[len(inner):] if key.startswith(inner) else key

    incompatible_keys.missing_keys[:] = [plain(k) for k in incompatible_keys.missing_keys]
    incompatible_keys.unexpected_keys[:] = [plain(k) for k in incompatible_keys.unexpected_keys]
    error_msgs[first:] = [m.replace(inner, prefix) for m in error_msgs[first:]]


def _string_arguments(schema):
    """The call's arguments that hold a str (anywhere inside them), as the user names them."""
    arg_nodes, kwarg_nodes = schema
    return [f"argument {i}" for i, n in enumerate(arg_nodes) if _holds_string(n)] + \
        [f"keyword argument {k!r}" for k, n in kwarg_nodes if _holds_string(n)]


def _holds_string(node):
    kind = node[0]  # the node kinds of _io's schemas
    if kind == "C":
        return issubclass(node[1], str)
    if kind in ("U", "L"):
        return any(_holds_string(c) for c in node[1])
    if kind == "NT":
        return any(_holds_string(c) for c in node[2])
    if kind == "D":
        return any(_holds_string(c) for _, c in node[2])
    return False
