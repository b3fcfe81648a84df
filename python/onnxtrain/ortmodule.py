"""ORTModule: wrap a torch.nn.Module so that its forward and backward run in onnxtrain."""
import collections
import logging
import time
import types
import warnings

import torch

from . import _C, _cache, _io, profiler
from ._autograd import ORTModuleFunction
from ._engine import Graphs
from ._export import TRACE_BATCH, ExportError, diagnose_input_dtypes, export
from ._logging import apply_log_level, logger
from ._options import DebugOptions, fallback_enabled

# Failures that the fallback policy covers: the module cannot be exported, or the engine lacks an
# op. Errors in the user's inputs (shapes, dtypes) always raise.
_FALLBACK_ERRORS = (ExportError, _io.UnsupportedTypeError, _C.UnsupportedError)


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
    changes. Batch and sequence lengths, and the values of int and float arguments, change freely.
    """

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions = None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        self._original_module = module
        self._debug_options = debug_options or DebugOptions()
        apply_log_level(self._debug_options.log_level)
        if self._debug_options.plan_cache_mb is not None:
            _C.set_arena_budget(self._debug_options.plan_cache_mb << 20)
        if self._debug_options.buffer_cache_mb is not None:
            _C.set_buffer_cache_limit(self._debug_options.buffer_cache_mb << 20)
        if self._debug_options.profile_path:
            profiler.start(self._debug_options.profile_path)
        self._reset_state()

    def _reset_state(self):
        # (training, input schema, tensor signature) -> (Graphs, _ParamLookup), least recently used
        # first; bounded by DebugOptions.max_cached_graphs.
        self._graphs = collections.OrderedDict()
        self._fallback_reason = None
        self._scalars_as_tensors = True  # False once an export baked a Python number in
        self.engine_runs = 0  # forward calls the engine served: tests use it to prove no fallback

    @property
    def module(self):
        return self._original_module

    # ---- calls ----

    def forward(self, *args, **kwargs):
        if self._fallback_reason is not None:
            return self._original_module(*args, **kwargs)
        try:
            graphs, params, tensors = self._graphs_for(args, kwargs)
            feeds = self._feeds(graphs, params, tensors)
            self.engine_runs += 1
            try:
                outputs = self._run(graphs, feeds)
            except _C.EngineError as e:
                if isinstance(e, _C.UnsupportedError) or not graphs.exported.shrunk or graphs.proven:
                    raise
                # The graph traced on a small batch does not hold at full size (a hard-coded shape,
                # say): export again from the real inputs.
                logger.info("onnxtrain: the graph traced on %d samples failed at full size (%s); exporting "
                            "again from the full inputs", TRACE_BATCH, e)
                del e
                graphs, params, tensors = self._graphs_for(args, kwargs, full_trace=True)
                feeds = self._feeds(graphs, params, tensors)
                outputs = self._run(graphs, feeds)
            graphs.proven = True
        except _FALLBACK_ERRORS as e:
            reason = str(e)
            del e
            return self._fall_back(reason, args, kwargs)
        outputs = graphs.apply_buffer_updates(self._original_module, outputs)
        return _io.unflatten_outputs(graphs.exported.output_schema, list(outputs))

    @staticmethod
    def _feeds(graphs, params, tensors):
        """The graph's inputs in order: the user's tensors and the module's parameters and buffers."""
        feeds = [tensors[ref] if kind == "input" else None for kind, ref in graphs.exported.graph_inputs]
        param_iter = iter(params.tensors())
        feeds = [t if t is not None else next(param_iter) for t in feeds]
        return [t if t.is_contiguous() else t.contiguous() for t in feeds]

    @staticmethod
    def _run(graphs, feeds):
        if torch.is_grad_enabled() and any(t.requires_grad for t in feeds):
            run = graphs.training_run(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
            return ORTModuleFunction.apply(run, *feeds)
        return graphs.infer(feeds)

    def _graphs_for(self, args, kwargs, full_trace=False):
        tensors, schema = _io.flatten_inputs(args, kwargs, self._scalars_as_tensors)
        training = self._original_module.training
        key = (training, schema, _io.tensor_signature(tensors))
        entry = None if full_trace else self._graphs.get(key)
        if entry is not None:
            self._graphs.move_to_end(key)
        else:
            entry = self._build(key, tensors, schema, training, full_trace)
            if entry[0].exported.bakes_scalars and self._scalars_as_tensors:
                # The trace turned a Python number into a constant: from now on numbers are part of
                # the schema, so each value gets its own export, as correctness requires.
                logger.info("onnxtrain: %s uses a Python number as a constant; numbers now key the export",
                            type(self._original_module).__name__)
                self._scalars_as_tensors = False
                self._graphs.clear()
                return self._graphs_for(args, kwargs)
        graphs, params = entry
        return graphs, params, tensors

    def _build(self, key, tensors, schema, training, full_trace=False):
        name = type(self._original_module).__name__
        start = time.perf_counter()
        cache_key = None
        exported = None
        if _cache.directory():
            cache_key = _cache.key(self._original_module, training, schema, key[2])
            exported = None if full_trace else _cache.load(cache_key)
            if exported is not None:
                logger.info("onnxtrain: loaded the %s export of %s from the cache", "train" if training else "eval",
                            name)
        if exported is None:
            try:
                exported = export(self._original_module, tensors, schema, training, full_trace)
            except ExportError as e:
                dtype_error = diagnose_input_dtypes(self._original_module, tensors, schema, str(e))
                if dtype_error is not None:
                    raise dtype_error from None
                raise
            for message, from_user_code in exported.trace_warnings:
                logger.log(logging.WARNING if from_user_code else logging.DEBUG,
                           "onnxtrain: exporting %s: the tracer warns that the graph may not generalize: %s",
                           name, message)
            if cache_key is not None:
                _cache.store(cache_key, exported)
        graphs = Graphs(exported, name, training, self._debug_options, time.perf_counter() - start)
        params = _ParamLookup(self._original_module, [ref for kind, ref in exported.graph_inputs if kind == "param"])
        self._graphs[key] = (graphs, params)
        self._graphs.move_to_end(key)
        while len(self._graphs) > self._debug_options.max_cached_graphs:
            self._graphs.popitem(last=False)
            logger.info("onnxtrain: %s keeps %d graphs (DebugOptions.max_cached_graphs); dropping the least "
                        "recently used", name, self._debug_options.max_cached_graphs)
        return self._graphs[key]

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

    def state_dict(self, *args, **kwargs):
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self._original_module.load_state_dict(state_dict, strict)

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
        self._graphs.clear()  # the forward may now read it

    def register_parameter(self, name, param):
        if "_original_module" not in self._modules:  # during nn.Module's own __init__
            return super().register_parameter(name, param)
        self._original_module.register_parameter(name, param)
        self._graphs.clear()

    def _apply(self, fn):
        # .to(), .double(), .half(), ...: new dtypes or devices need new graphs.
        result = super()._apply(fn)
        self._graphs.clear()
        return result

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
        for transient in ("_graphs", "_fallback_reason", "_scalars_as_tensors", "engine_runs"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_state()
