"""torch's chunk, split and unbind during export: how many pieces they make follows the size at
run time in eager, while the exported graph has a fixed number of outputs (and, for split and
unbind, torch 1.13 writes their sizes as constants). Every dim is exported dynamic, so while the
module is traced each such call cuts its tensor through an ai.onnxtrain::SplitGuard node that
records the pieces of the trace. At run time the engine's SplitGuard checks that the size at hand
makes the same pieces (src/ops/tensor/split_guard.cc); when it does not, the run raises
ExportMismatchError and ORTModule exports again for those inputs.
"""
import contextlib

import torch

DOMAIN = "ai.onnxtrain"

# Applied without going through torch.autograd.Function.apply, which the export replaces while it
# traces (to record the user's Functions): the guard is ours, not the user's.
_unrecorded_apply = torch._C._FunctionBase.__dict__["apply"]


class _SplitGuard(torch.autograd.Function):
    """Passes its tensor through; exports as SplitGuard with the trace's pieces."""

    @staticmethod
    def forward(ctx, x, kind, axis, parameter, pieces):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None

    @staticmethod
    def symbolic(g, x, kind, axis, parameter, pieces):
        # An empty list has no type the exporter can tell: no pieces is the attribute's absence.
        listed = {"pieces_i": pieces} if pieces else {}
        out = g.op(f"{DOMAIN}::SplitGuard", x, kind_s=kind, axis_i=axis, parameter_i=parameter, **listed)
        out.setType(x.type())
        return out


@contextlib.contextmanager
def _tracing_paused():
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


def _guarded(original, kind, x, parameter, dim, cut):
    """(x passed through a SplitGuard, the trace's piece sizes) when a trace is running and the
    pieces depend on a size; else (x, None)."""
    if torch._C._get_tracing_state() is None or not isinstance(x, torch.Tensor) or not isinstance(dim, int) \
            or x.dim() == 0:
        return x, None
    axis = dim + x.dim() if dim < 0 else dim
    if not 0 <= axis < x.dim():
        return x, None  # torch raises its own error on the real call
    with _tracing_paused():
        pieces = [1] * x.shape[axis] if kind == "unbind" else [p.shape[axis] for p in cut(original, x)]
    return _unrecorded_apply.__get__(None, _SplitGuard)(x, kind, axis, int(parameter), pieces), pieces


def _chunk(original):
    def chunk(input, chunks, dim=0):
        if not isinstance(chunks, int):
            return original(input, chunks, dim)
        x, _ = _guarded(original, "chunk", input, chunks, dim, lambda f, t: f(t.detach(), chunks, dim))
        return original(x, chunks, dim)

    return chunk


def _split(original):
    def split(self, split_size, dim=0):
        if not isinstance(split_size, int):  # a list of sizes: the number of pieces is fixed
            return original(self, split_size, dim)
        x, pieces = _guarded(original, "split", self, split_size, dim, lambda f, t: f(t.detach(), split_size, dim))
        # With the size unknown to it, torch 1.13's symbolic writes split_size for every piece, the
        # last one too: the sizes of the trace, which the guard holds to, are written instead.
        return original(x, split_size if pieces is None else pieces, dim)

    return split


def _unbind(original):
    def unbind(input, dim=0):
        return original(_guarded(original, "unbind", input, 0, dim, None)[0], dim)

    return unbind


# (owner, name, wrapper). torch.split calls Tensor.split and Tensor.__iter__ calls Tensor.unbind,
# so both are covered through the methods.
_PATCHES = ((torch.Tensor, "chunk", _chunk), (torch, "chunk", _chunk), (torch.Tensor, "split", _split),
            (torch.Tensor, "unbind", _unbind), (torch, "unbind", _unbind))


@contextlib.contextmanager
def guarded_splits():
    """While the export traces: chunk, split and unbind cut through SplitGuards."""
    saved = []
    for owner, name, wrap in _PATCHES:
        own = name in vars(owner)
        original = getattr(owner, name)
        saved.append((owner, name, own, vars(owner).get(name)))
        setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        for owner, name, own, value in reversed(saved):
            if own:
                setattr(owner, name, value)
            else:
                delattr(owner, name)
