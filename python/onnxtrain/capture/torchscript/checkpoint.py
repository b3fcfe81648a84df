"""torch.utils.checkpoint during export: how a checkpointed segment enters the graph.

The segment is traced inline, its tensor inputs and outputs passed through boundary markers
(ai.onnxtrain::CheckpointBegin and CheckpointEnd, one node each per segment). The engine removes
the markers before anything else and flags the nodes between them; after differentiation it
recomputes in backward the segment values backward reads, from the segment's inputs, so that the
stash holds those inputs instead of the segment's activations (src/passes/checkpoint_segments.cc,
src/passes/recompute.cc). A Dropout inside is recomputed from the mask its forward drew, so the
recompute sees the same mask, as torch's preserve_rng_state gives eager.
"""
import contextlib
import inspect
import itertools
import types

import torch
import torch.utils.checkpoint

DOMAIN = "ai.onnxtrain"
_segment_ids = itertools.count()


class _Boundary(torch.autograd.Function):
    """Passes tensors through unchanged; exports as the marker op named by `_op`."""

    _op = None

    @staticmethod
    def forward(ctx, segment, *tensors):
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + grads


def _boundary_symbolic(op):
    def symbolic(g, segment, *tensors):
        outputs = g.op(f"{DOMAIN}::{op}", *tensors, segment_i=segment, outputs=len(tensors))
        outputs = (outputs,) if len(tensors) == 1 else outputs
        for out, t in zip(outputs, tensors):
            out.setType(t.type())
        return outputs if len(tensors) > 1 else outputs[0]

    return staticmethod(symbolic)


class _Begin(_Boundary):
    symbolic = _boundary_symbolic("CheckpointBegin")


class _End(_Boundary):
    symbolic = _boundary_symbolic("CheckpointEnd")


# Applied without going through torch.autograd.Function.apply, which the export replaces while it
# traces (to record the user's Functions): the markers are ours, not the user's.
_apply = torch._C._FunctionBase.__dict__["apply"]


def _through(marker, segment, values):
    """`values` with its tensors passed through `marker`; other items unchanged."""
    positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if not positions:
        return list(values)
    passed = _apply.__get__(None, marker)(segment, *(values[i] for i in positions))
    out = list(values)
    for i, t in zip(positions, passed):
        out[i] = t
    return out


def traced_segment(args, kwargs=None):
    """Called by the export's Function.apply hook for CheckpointFunction.apply(run_function,
    preserve_rng_state, *inputs): traces the segment between boundary markers."""
    run_function, inputs = args[0], args[2:]
    segment = next(_segment_ids)
    outputs = run_function(*_through(_Begin, segment, inputs), **(kwargs or {}))
    if isinstance(outputs, torch.Tensor):
        return _through(_End, segment, [outputs])[0]
    if isinstance(outputs, (tuple, list)) and type(outputs) in (tuple, list):
        return type(outputs)(_through(_End, segment, list(outputs)))
    return outputs  # another structure: traced unmarked, its values stashed as without checkpoint


def _trampoline(function, *args, **kwargs):
    # Runs as torch.utils.checkpoint.checkpoint's code (see marked_checkpoints), so its globals are
    # that module's.
    return _onnxtrain_checkpoint(function, *args, **kwargs)  # noqa: F821 - set by marked_checkpoints


# checkpoint()'s options that only change how eager recomputes: the engine recomputes on its own.
_EAGER_OPTIONS = ("context_fn", "determinism_check", "debug", "early_stop", "respect_saved_tensors_hooks")


@contextlib.contextmanager
def replaced_checkpoint(replacement):
    """torch.utils.checkpoint.checkpoint runs replacement(untouched, function, *args, **kwargs)
    while the context lasts, where untouched is torch's own implementation. The function's code
    is swapped for a trampoline, since callers hold the function itself (a from-import, a
    functools.partial, as Hugging Face's gradient checkpointing does)."""
    # torch 2.x wraps checkpoint (to keep dynamo out of it); the wrapper calls the function itself.
    target = inspect.unwrap(torch.utils.checkpoint.checkpoint)
    original_code = target.__code__
    untouched = types.FunctionType(original_code, target.__globals__, target.__name__, target.__defaults__,
                                   target.__closure__)
    untouched.__kwdefaults__ = target.__kwdefaults__
    target.__globals__["_onnxtrain_checkpoint"] = lambda *args, **kwargs: replacement(untouched, *args, **kwargs)
    target.__code__ = _trampoline.__code__
    try:
        yield
    finally:
        target.__code__ = original_code
        target.__globals__.pop("_onnxtrain_checkpoint", None)


@contextlib.contextmanager
def marked_checkpoints():
    """While the export traces: every torch.utils.checkpoint.checkpoint call, reentrant or not,
    traces its segment between boundary markers (torch's non-reentrant implementation changed
    between versions: torch 2.x runs it as a generator around the call, which cannot hand the
    segment other tensors). Outside a trace, the call runs torch's code."""

    def marked(untouched, function, *args, use_reentrant=None, **kwargs):
        if torch._C._get_tracing_state() is None:
            return untouched(function, *args, use_reentrant=use_reentrant, **kwargs)
        preserve_rng_state = kwargs.pop("preserve_rng_state", True)
        for option in _EAGER_OPTIONS:
            kwargs.pop(option, None)
        if kwargs and use_reentrant:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return traced_segment((function, preserve_rng_state) + args, kwargs)

    with replaced_checkpoint(marked):
        yield
