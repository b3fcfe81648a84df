"""What an ORTModule's call does when the graphs it has do not serve it: which export it runs on
next (another variant of its call structure, one traced from the full batch or from these very
inputs), when Python numbers are baked into the export, and when the module falls back to PyTorch.
The mechanisms (exports, the cache, runs) are _engine_calls.EngineCalls'."""
import warnings

from . import _C, _io
from .capture import TRACE_BATCH, ExportError
from ._logging import logger
from ._options import fallback_enabled

# Failures that the fallback policy covers: the module cannot be exported, or the engine lacks an
# op. Errors in the user's inputs (shapes, dtypes) always raise.
FALLBACK_ERRORS = (ExportError, _io.UnsupportedTypeError, _C.UnsupportedError)


def run_call(calls, args, kwargs, flat=None, prepared=None):
    """Runs one call of `calls` (an EngineCalls) on the engine, on the export that fits it, or in
    PyTorch where the fallback policy allows. `flat` and `prepared`: see EngineCalls.graphs_for."""
    try:
        graphs, params, tensors = calls.graphs_for(args, kwargs, flat=flat, prepared=prepared)
        feeds = calls.feeds(graphs, params, tensors)
        calls.engine_runs += 1
        try:
            outputs = calls.run(graphs, feeds, tensors)
        except _C.ExportMismatchError as e:
            mismatch = str(e)
            del e
            graphs, outputs = run_fitting_export(calls, args, kwargs, graphs, mismatch)
        except _C.EngineError as e:
            if isinstance(e, _C.UnsupportedError):
                raise
            if graphs.exported.sizes_may_be_baked():
                # The trace warned in the module's code (a size it read as a Python number, as
                # HF's mask code does under TorchScript): a graph for these sizes is exported.
                reason = f"the graph its trace warned about failed at these sizes ({e})"
                del e
                graphs, outputs = run_fitting_export(calls, args, kwargs, graphs, reason)
            elif not graphs.exported.shrunk or graphs.proven:
                raise
            else:
                # The graph traced on a small batch does not hold at full size (a hard-coded shape,
                # say): export again from the real inputs.
                logger.info("onnxtrain: the graph traced on %d samples failed at full size (%s); exporting "
                            "again from the full inputs", TRACE_BATCH, e)
                del e
                graphs, params, tensors = calls.graphs_for(args, kwargs, full_trace=True)
                outputs = calls.run(graphs, calls.feeds(graphs, params, tensors), tensors)
        graphs.proven = True
    except FALLBACK_ERRORS as e:
        reason = str(e)
        del e
        return fall_back(calls, reason, args, kwargs)
    return calls.outputs(graphs, outputs, args, kwargs)


def run_fitting_export(calls, args, kwargs, failed, mismatch):
    """The engine refused `failed` for these inputs: a chunk, split or unbind makes other pieces at
    their sizes than at the trace's (SplitGuard), or a size the trace baked in does not hold. Runs
    the call on another export of the same call structure that fits, or on a new one traced from
    these inputs, which is kept beside the others (a last, smaller batch alternates with the full
    ones). Returns (graphs, outputs)."""
    tensors, _, key = calls.flatten(args, kwargs)
    if failed.exported.shrunk and not failed.proven:  # traced on a cut-down batch: never fit
        calls.cache.drop_graphs(failed)
    for other_key, entry in calls.cache.variants(key.call):
        if entry.graphs is failed or not entry.state.unchanged():
            continue
        try:
            outputs = calls.run(entry.graphs, calls.feeds(entry.graphs, entry.params, tensors), tensors)
        except _C.ExportMismatchError:
            continue
        except _C.EngineError as e:
            if isinstance(e, _C.UnsupportedError) or not entry.graphs.exported.sizes_may_be_baked():
                raise
            continue
        calls.cache.ran(other_key)
        return entry.graphs, outputs
    variant = calls.cache.next_variant(key.call)
    logger.info("onnxtrain: %s: %s; exporting again from these inputs", calls.name, mismatch)
    graphs, params, tensors = calls.graphs_for(args, kwargs, full_trace=True, variant=variant)
    calls.cache.ran(key._replace(variant=variant))
    return graphs, calls.run(graphs, calls.feeds(graphs, params, tensors), tensors)


def bake_numbers(calls, args, kwargs, why):
    """From now on the module's Python number arguments are baked into its exports as the numbers
    they are, so each value gets its own export, as correctness requires. Returns graphs_for's
    answer for this call."""
    logger.info("onnxtrain: %s takes Python numbers as they are, since %s; numbers now key the export",
                calls.name, why)
    calls.scalars_as_tensors = False
    calls.forget_graphs(variants_too=True)
    return calls.graphs_for(args, kwargs)


def fall_back(calls, reason, args, kwargs):
    """The module runs in PyTorch from now on, loudly; or, with ONNXTRAIN_FALLBACK=0, the call raises."""
    if not fallback_enabled():
        raise RuntimeError(f"onnxtrain cannot run {calls.name}: {reason} "
                           "(ONNXTRAIN_FALLBACK=0, so there is no fallback to PyTorch)")
    message = (f"onnxtrain: falling back to PyTorch for {calls.name}: {reason}. "
               "Set ONNXTRAIN_FALLBACK=0 to raise instead.")
    warnings.warn(message, RuntimeWarning, stacklevel=5)
    logger.warning(message)
    calls.fallback_reason = reason
    return calls.module(*args, **kwargs)
