"""ORTModule: wrap a torch.nn.Module so that its forward and backward run in onnxtrain."""
import time
import warnings

import torch

from . import _C, _io
from ._autograd import ORTModuleFunction
from ._engine import Graphs
from ._export import ExportError, export
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
    """Runs `module` through onnxtrain's engine. On the first call (and whenever the input
    structure, dtypes, ranks or the train/eval mode change) the module is exported to ONNX;
    batch and sequence lengths may change freely."""

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions = None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ORTModule wraps a torch.nn.Module, got {type(module).__name__}")
        self._original_module = module
        self._debug_options = debug_options or DebugOptions()
        apply_log_level(self._debug_options.log_level)
        self._graphs = {}  # (training, input schema, tensor signature) -> (Graphs, _ParamLookup)
        self._fallback_reason = None
        self.engine_runs = 0  # forward calls the engine served: tests use it to prove no fallback

    @property
    def module(self):
        return self._original_module

    # ---- calls ----

    def forward(self, *args, **kwargs):
        if self._fallback_reason is not None:
            return self._original_module(*args, **kwargs)
        try:
            tensors, schema = _io.flatten_inputs(args, kwargs)
            training = self._original_module.training
            key = (training, schema, _io.tensor_signature(tensors))
            entry = self._graphs.get(key)
            if entry is None:
                entry = self._build(key, tensors, schema, training)
            graphs, params = entry
            feeds = []
            for kind, ref in graphs.exported.graph_inputs:
                feeds.append(tensors[ref] if kind == "input" else None)
            param_iter = iter(params.tensors())
            feeds = [t if t is not None else next(param_iter) for t in feeds]
            feeds = [t if t.is_contiguous() else t.contiguous() for t in feeds]
            self.engine_runs += 1
            if torch.is_grad_enabled() and any(t.requires_grad for t in feeds):
                run = graphs.training_run(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
                outputs = ORTModuleFunction.apply(run, *feeds)
            else:
                outputs = graphs.infer(feeds)
        except _FALLBACK_ERRORS as e:
            reason = str(e)
            del e
            return self._fall_back(reason, args, kwargs)
        return _io.unflatten_outputs(graphs.exported.output_schema, list(outputs))

    def _build(self, key, tensors, schema, training):
        name = type(self._original_module).__name__
        start = time.perf_counter()
        exported = export(self._original_module, tensors, schema, training)
        graphs = Graphs(exported, name, training, self._debug_options, time.perf_counter() - start)
        params = _ParamLookup(self._original_module, [ref for kind, ref in exported.graph_inputs if kind == "param"])
        self._graphs[key] = (graphs, params)
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

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._original_module, name)
