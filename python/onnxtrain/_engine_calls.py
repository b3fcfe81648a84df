"""How an ORTModule's calls reach the engine: each call's graphs (exported, cached, built beside the
eager calls of the warm-up), its feeds and its run. What a call does when its graphs do not serve
it (another export, numbers baked in, the fallback) is the call policy's (_call_policy.py)."""
import logging
import time
import warnings

import torch

from . import _C, _cache, _call_policy, _eager_warmup, _io
from ._autograd import ORTModuleFunction
from ._engine import Graphs
from ._graph_cache import CachedGraphs, GraphCache, ParamLookup
from .capture import BackgroundExport, ExportError, diagnose_input_dtypes, export
from ._logging import logger
from ._module_state import ModuleState


class EngineCalls:
    """The engine's side of one ORTModule, over the wrapped `module`."""

    def __init__(self, module, options, forward_signature):
        self.module = module
        self.options = options
        self.forward_signature = forward_signature  # None where Python cannot tell it
        self.name = type(module).__name__
        self.cache = GraphCache(options.max_cached_graphs, self.name)
        self.fallback_reason = None  # set when the calls run in PyTorch instead (see _call_policy)
        self.scalars_as_tensors = True  # False once an export baked a Python number in
        self.warned_string_inputs = False
        self.engine_runs = 0  # forward calls the engine served: tests use it to prove no fallback
        self.eager_warmup_runs = 0  # calls that ran in eager PyTorch while their capture went on
        self.warmup = _eager_warmup.EagerWarmup() if _eager_warmup.enabled(options.eager_warmup) else None

    def __call__(self, args, kwargs):
        if self.fallback_reason is not None:
            return self.module(*args, **kwargs)
        flat = prepared = None
        if self.warmup is not None:
            flat, prepared = self._warmup_step(args, kwargs)
            if prepared is _eager_warmup.EAGER:
                return self._run_eagerly(args, kwargs)
        return _call_policy.run_call(self, args, kwargs, flat, prepared)

    # ---- flattening, feeds and runs ----

    def flatten(self, args, kwargs, variant=None):
        """(tensors, schema, key) of a call: its inputs flattened, and its graphs' key."""
        tensors, schema = _io.flatten_inputs(args, kwargs, self.scalars_as_tensors)
        return tensors, schema, self.cache.key(self.module.training, schema, tensors, variant)

    @staticmethod
    def feeds(graphs, params, tensors):
        """The graph's inputs in order: the user's tensors and the module's parameters and buffers."""
        feeds = [tensors[ref] if kind == "input" else None for kind, ref in graphs.exported.graph_inputs]
        param_iter = iter(params.tensors())
        feeds = [t if t is not None else next(param_iter) for t in feeds]
        return [t if t.is_contiguous() else t.contiguous() for t in feeds]

    @staticmethod
    def run(graphs, feeds, tensors):
        misfit = graphs.exported.misfit(tensors)
        if misfit is not None:  # torch.export fixed a size these inputs do not have
            raise _C.ExportMismatchError(misfit)
        if torch.is_grad_enabled() and any(t.requires_grad for t in feeds):
            run = graphs.training_run(tuple(t.requires_grad and t.is_floating_point() for t in feeds))
            return ORTModuleFunction.apply(run, *feeds)
        return graphs.infer(feeds)

    def outputs(self, graphs, outputs, args, kwargs):
        """The call's outputs in the structure the module returns, its buffers updated."""
        outputs = graphs.apply_buffer_updates(self.module, outputs)
        return _io.unflatten_outputs(graphs.exported.output_schema, list(outputs), (args, kwargs))

    # ---- the eager warm-up ----

    def _warmup_step(self, args, kwargs):
        """(what graphs_for needs of this call, already computed: its tensors, schema, key and its
        graphs when they exist and still fit the module; or None), and what the eager warm-up
        decides for it: EAGER, a finished capture for graphs_for to take, or None."""
        try:
            tensors, schema, key = self.flatten(args, kwargs)
        except _io.UnsupportedTypeError:
            return None, None  # graphs_for raises it again, where the fallback policy decides
        entry = self.cache.get(key)
        has_graphs = entry is not None and entry.state.unchanged()

        def start_job():
            self.check_call(args, kwargs, schema)
            return self._start_background_capture(key, tensors, schema)

        decision = self.warmup.before_call(key, has_graphs, start_job)
        while self.warmup.finished:  # another call structure's capture, done while its calls were away
            job = self.warmup.finished.pop()
            if job.exported is not None and not (job.exported.bakes_scalars and self.scalars_as_tensors):
                self.build(job.key, None, job.key.schema, prepared=job)
        return (tensors, schema, key, entry if has_graphs else None), decision

    def _start_background_capture(self, key, tensors, schema):
        """The WarmupJob that captures this call beside the eager calls, or None where it cannot
        (a variant of a call structure, or no forked export here): the call then captures blocking."""
        if key.variant != 0:
            return None
        cache_key = cached = None
        if _cache.directory():
            cache_key = _cache.key(self.module, key.training, schema, key.signature)
            cached = _cache.load(cache_key)
        export_job = None
        if cached is None:
            export_job = BackgroundExport(self.module, tensors, schema, key.training)
            if export_job.in_process:
                return None
        grad_call = torch.is_grad_enabled()
        input_requires_grad = [t.requires_grad and t.is_floating_point() for t in tensors]

        def build(exported, export_seconds):  # on the job's thread
            graphs = Graphs(exported, self.name, key.training, self.options, export_seconds)
            params = ParamLookup(self.module, [ref for kind, ref in exported.graph_inputs if kind == "param"])
            if grad_call:
                feeds = self.feeds(graphs, params, tensors)
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
                    "graphs are ready", self.name)
        return job

    def _run_eagerly(self, args, kwargs):
        self.eager_warmup_runs += 1
        _eager_warmup.STATISTICS["eager_warmup_calls"] += 1
        outputs = self.module(*args, **kwargs)
        job = self.warmup.job
        if job is not None and job.state is None:
            # After the first eager call, as after an export in this process: what the forward sets on
            # its first call (a lazily built cache) is not a change to export again for.
            job.state = ModuleState(self.module)
        return outputs

    def forget_graphs(self, variants_too=False):
        """The module changed in a way the exports may have baked in: every graph, and any capture in
        progress, goes."""
        self.cache.clear(variants_too)
        if self.warmup is not None:
            self.warmup.forget()

    # ---- graphs ----

    def graphs_for(self, args, kwargs, full_trace=False, variant=None, flat=None, prepared=None):
        """(graphs, parameter lookup, input tensors) of this call, exported if need be. `flat` is
        what _warmup_step found for this call (its graphs checked once per call, not twice);
        `prepared` a finished WarmupJob for this call."""
        checked = None
        if flat is not None and variant is None:
            tensors, schema, key, checked = flat
        else:
            tensors, schema, key = self.flatten(args, kwargs, variant)
        if checked is not None and not full_trace and self.cache.get(key) is checked:
            self.cache.touch(key)
            return checked.graphs, checked.params, tensors
        entry = None if full_trace else self.cache.usable(key)
        if entry is None:
            self.check_call(args, kwargs, schema)
            numbers_as_tensors = self.scalars_as_tensors and bool(_io.scalar_positions(schema))
            try:
                entry = self.build(key, tensors, schema, full_trace,
                                   prepared if prepared is not None and prepared.key == key else None)
            except ExportError as e:
                if not numbers_as_tensors:
                    raise
                return _call_policy.bake_numbers(self, args, kwargs,
                                                 f"its export with them as 0-d tensors failed ({e})")
            if entry.graphs.exported.bakes_scalars and self.scalars_as_tensors:
                return _call_policy.bake_numbers(self, args, kwargs, "it uses them as constants, or its code treats "
                                                 "them otherwise than 0-d tensors")
        return entry.graphs, entry.params, tensors

    def ready_graphs(self, args, kwargs):
        """(graphs, parameter lookup, input tensors) of this call when an earlier call ran the same
        graphs through the engine and nothing invalidated them since (no export, retry or
        fallback to expect); None otherwise. For onnxtrain.TrainStep's whole step."""
        if self.fallback_reason is not None:
            return None
        try:
            tensors, _, key = self.flatten(args, kwargs)
        except _io.UnsupportedTypeError:
            return None
        entry = self.cache.get(key)
        if entry is None or not entry.graphs.proven or not entry.state.unchanged() or \
                entry.graphs.exported.misfit(tensors):
            return None
        self.cache.touch(key)
        return entry.graphs, entry.params, tensors

    def check_call(self, args, kwargs, schema):
        """Before an export: a call the forward cannot take raises TypeError, as eager does, rather
        than failing inside the exporter; and strings, which the export bakes in, are pointed out
        once."""
        if self.forward_signature is not None:
            try:
                self.forward_signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self.name}.forward() {e}") from None
        if not self.warned_string_inputs:
            strings = _string_arguments(schema)
            if strings:
                self.warned_string_inputs = True
                warnings.warn(
                    f"onnxtrain: {self.name}.forward received a str ({', '.join(strings)}); the export bakes each "
                    "string into the graph as a constant, so every distinct string value exports the module "
                    "again. Pass tensors, or few distinct strings.", UserWarning, stacklevel=8)

    def build(self, key, tensors, schema, full_trace=False, prepared=None):
        """Exports this call (or takes `prepared`'s export, a finished WarmupJob's) and keeps its
        graphs under `key` (a CachedGraphs)."""
        start = time.perf_counter()
        if prepared is not None and prepared.in_process:
            prepared = None  # its child could not export: this process does, as export() would
        if prepared is not None and prepared.error is not None:
            self.raise_export_error(prepared.error, tensors, schema)
        cache_key = None
        exported = None
        fresh = True  # exported now (here or beside the eager calls), not loaded from the cache
        if prepared is not None:
            exported, cache_key = prepared.exported, None if prepared.from_cache else prepared.cache_key
            fresh = not prepared.from_cache
            export_seconds = prepared.export_seconds
        elif _cache.directory():
            # Variant 0 keeps the key of a call structure's first export; later ones have their own.
            cache_key = _cache.key(self.module, key.training, schema,
                                   key.signature if key.variant == 0 else (key.signature, key.variant))
            exported = None if full_trace else _cache.load(cache_key)
            if exported is not None:
                cache_key, fresh = None, False
                logger.info("onnxtrain: loaded the %s export of %s from the cache",
                            "train" if key.training else "eval", self.name)
        if exported is None:
            try:
                exported = export(self.module, tensors, schema, key.training, full_trace)
            except ExportError as e:
                self.raise_export_error(e, tensors, schema)
        if fresh:
            for message, from_user_code in exported.trace_warnings:
                logger.log(logging.WARNING if from_user_code else logging.DEBUG,
                           "onnxtrain: exporting %s: the tracer warns that the graph may not generalize: %s",
                           self.name, message)
        if cache_key is not None:
            _cache.store(cache_key, exported)
        if prepared is not None and prepared.built is not None:
            graphs, params = prepared.built
        else:
            if prepared is None:
                export_seconds = time.perf_counter() - start
            graphs = Graphs(exported, self.name, key.training, self.options, export_seconds)
            params = ParamLookup(self.module, [ref for kind, ref in exported.graph_inputs if kind == "param"])
        # Taken after the export: an export in this process runs the forward, which may set attributes.
        state = prepared.state if prepared is not None and prepared.state is not None else ModuleState(self.module)
        if prepared is not None:
            logger.info("onnxtrain: %s switches from eager PyTorch to the engine after %.1f s of capture beside "
                        "%d eager calls", self.name, time.perf_counter() - prepared.started, self.eager_warmup_runs)
            _eager_warmup.return_freed_memory()
        return self.cache.store(key, CachedGraphs(graphs, params, state))

    def raise_export_error(self, error, tensors, schema):
        """Raises an export's error, or the clearer one that the inputs' dtypes explain it."""
        dtype_error = None if tensors is None else diagnose_input_dtypes(self.module, tensors, schema, str(error))
        if dtype_error is not None:
            raise dtype_error from None
        raise error


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
