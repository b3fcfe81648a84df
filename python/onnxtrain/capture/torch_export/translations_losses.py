"""nll_loss (and cross_entropy, which the exporter decomposes into LogSoftmax and it) as the
engine runs them, in place of onnxscript's, which the suite found to differ from eager for
ignore_index and reduction='none'.

nll_loss_forward becomes ONNX's NegativeLogLikelihoodLoss, whose engine kernel is checked against
eager's weight, ignore_index and reduction semantics; unreduced, the loss is gathered per position
(GatherElements), since the exporter gives the ONNX losses' unreduced output rank 0 (and what read it
next went wrong: a sum of it was an Identity). cross_entropy_loss, nll_loss and nll_loss_nd are
left to decompose into it (decomposed()): onnxscript's translations of them, kept whole, had the
same fault. An input without a batch dim ([C], a 0-d target) gets one.
"""
from onnxscript import opset18 as op

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _batched(x, target):
    """(x, target, whether a batch dim was added): the ONNX losses need [N, C, ...] and [N, ...]."""
    if len(x.shape) == 1:
        return op.Unsqueeze(x, op.Constant(value_ints=[0])), op.Unsqueeze(target, op.Constant(value_ints=[0])), True
    return x, target, False


def _unbatched(loss, added, reduction):
    if added and reduction == "none":
        return op.Squeeze(loss, op.Constant(value_ints=[0]))
    return loss


def nll_loss_forward(x, target, weight=None, reduction: int = 1, ignore_index: int = -100):
    """(the loss, aten's total weight)."""
    mode = _REDUCTIONS[reduction]
    x, target, added = _batched(x, target)
    if mode == "none":
        loss = _nll_per_position(x, target, weight, ignore_index)
    else:
        inputs = [x, target] if weight is None else [x, target, weight]
        loss = op.NegativeLogLikelihoodLoss(*inputs, reduction=mode, ignore_index=ignore_index)
    return _unbatched(loss, added, mode), _total_weight(x, target, weight, ignore_index)


def _kept_and_safe(target, ignore_index):
    """(the positions not ignored, the targets with the ignored ones replaced by class 0)."""
    kept = op.Not(op.Equal(target, op.CastLike(op.Constant(value_int=ignore_index), target)))
    return kept, op.Where(kept, target, op.CastLike(op.Constant(value_int=0), target))


def _nll_per_position(x, target, weight, ignore_index):
    """reduction='none' as -w[t] x[n, t] (0 where ignored), from GatherElements: the exporter gives
    NegativeLogLikelihoodLoss's unreduced output rank 0, so that a sum of it was an Identity.
    x is [N, C, ...], target [N, ...]."""
    kept, safe = _kept_and_safe(target, ignore_index)
    picked = op.GatherElements(x, op.Unsqueeze(safe, op.Constant(value_ints=[1])), axis=1)
    loss = op.Neg(op.Squeeze(picked, op.Constant(value_ints=[1])))
    if weight is not None:
        loss = op.Mul(loss, op.Gather(weight, safe, axis=0))
    return op.Where(kept, loss, op.CastLike(op.Constant(value_float=0.0), x))


def _total_weight(x, target, weight, ignore_index):
    """aten's second output: the summed weights of the targets not ignored (their count without
    weights), which cross_entropy's and nll_loss's modules never read."""
    kept, safe = _kept_and_safe(target, ignore_index)
    if weight is None:
        return op.ReduceSum(op.CastLike(kept, x), keepdims=0)
    zero = op.CastLike(op.Constant(value_float=0.0), x)
    return op.ReduceSum(op.Where(kept, op.Gather(weight, safe, axis=0), zero), keepdims=0)


def decomposed():
    """ATen ops the exporter must decompose rather than translate: kept whole, nll_loss's and
    nll_loss_nd's unreduced output reaches the translation of the next op with rank 0 (a sum of
    it then became an Identity); decomposed, they are nll_loss_forward, translated here."""
    return ["aten::nll_loss", "aten::nll_loss_nd", "aten::cross_entropy_loss"]  # the registry's keys


def table():
    import torch

    aten = torch.ops.aten
    return {
        aten.nll_loss_forward.default: nll_loss_forward,
        aten.nll_loss2d_forward.default: nll_loss_forward,

    }
