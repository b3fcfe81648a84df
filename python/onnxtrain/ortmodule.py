"""ORTModule: wrap a torch.nn.Module so that its forward and backward run in onnxtrain.

ORTModule itself is the module proxy: it stands in for the wrapped module (its forward signature,
state_dict keys, parameters and attributes). Its calls go to _engine_calls.EngineCalls, which
keeps their graphs (_graph_cache.GraphCache) and follows the call policy (_call_policy)."""
import functools
import inspect
import types

import torch

from . import _C, profiler
from ._compile import opaque_to_torch_compile, unwrap_compiled
from ._engine_calls import EngineCalls
from ._logging import apply_log_level
from ._options import DebugOptions

# Attributes that belong to the wrapper itself; every other attribute set on an ORTModule after its
# construction goes to the wrapped module, as ONNX Runtime's ORTModule does.
_WRAPPER_ATTRIBUTES = frozenset({
    "_original_module", "_debug_options", "_calls", "forward", "_forward_signature", "_pending_load_report",
    "engine_runs", "eager_warmup_runs"})
# The prefix the wrapped module's state has inside torch's own recursion (load_state_dict).
_INNER = "_original_module."


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
        self._install_forward_signature()
        self._calls = EngineCalls(self._original_module, self._debug_options, self._forward_signature)

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

    # ---- calls: EngineCalls runs them ----

    @opaque_to_torch_compile
    def forward(self, *args, **kwargs):
        return self._calls(args, kwargs)

    @property
    def fallback_reason(self):
        """Why this module runs in PyTorch instead of the engine, or None."""
        return self._calls.fallback_reason

    @property
    def engine_runs(self):
        """Forward calls the engine served (tests use it to prove that no fallback ran)."""
        return self._calls.engine_runs

    @engine_runs.setter
    def engine_runs(self, count):
        self._calls.engine_runs = count

    @property
    def eager_warmup_runs(self):
        """Calls that ran in eager PyTorch while their capture went on (see _eager_warmup)."""
        return self._calls.eager_warmup_runs

    @eager_warmup_runs.setter
    def eager_warmup_runs(self, count):
        self._calls.eager_warmup_runs = count

    # The parts' state, for the tests (TrainStep reads _calls itself).
    @property
    def _graphs(self):
        return self._calls.cache

    @property
    def _scalars_as_tensors(self):
        return self._calls.scalars_as_tensors

    @property
    def _warmup(self):
        return self._calls.warmup

    def _forget_graphs(self):
        calls = self.__dict__.get("_calls")
        if calls is not None:
            calls.forget_graphs()

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
            if name == "_original_module" and "_calls" in self.__dict__:
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
        for transient in ("_calls", "forward", "_forward_signature", "_pending_load_report"):
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
