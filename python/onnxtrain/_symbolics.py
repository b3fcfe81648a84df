"""ONNX symbolics that torch 1.13 lacks or gets wrong for training, registered only while
onnxtrain exports:

- mse_loss and l1_loss have no symbolic at all;
- cross_entropy with label_smoothing is refused, so it becomes onnxtrain's own
  SoftmaxCrossEntropyLoss, which takes a label_smoothing attribute;
- binary_cross_entropy_with_logits exports as log(sigmoid(x)), which overflows for large
  logits, so it becomes the stable form max(x, 0) - x*y + log(1 + exp(-|x|));
- adaptive_avg_pool needs a static input size, and every dim is dynamic here, so it becomes
  onnxtrain's AdaptiveAveragePool (or GlobalAveragePool for output size 1).
"""
import contextlib

import torch
from torch.onnx import symbolic_helper as sh

DOMAIN = "ai.onnxtrain"
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduce(g, loss, reduction):
    mode = _REDUCTIONS[sh._maybe_get_const(reduction, "i")]
    if mode == "mean":
        return g.op("ReduceMean", loss, keepdims_i=0)
    if mode == "sum":
        return g.op("ReduceSum", loss, keepdims_i=0)
    return loss


def _mse_loss(g, input, target, reduction):
    diff = g.op("Sub", input, target)
    return _reduce(g, g.op("Mul", diff, diff), reduction)


def _l1_loss(g, input, target, reduction):
    return _reduce(g, g.op("Abs", g.op("Sub", input, target)), reduction)


def _cross_entropy(g, input, target, weight, reduction, ignore_index, label_smoothing):
    smoothing = sh._maybe_get_const(label_smoothing, "f")
    mode = _REDUCTIONS[sh._maybe_get_const(reduction, "i")]
    ignore = sh._maybe_get_const(ignore_index, "i")
    inputs = [input, target] if sh._is_none(weight) else [input, target, weight]
    if not smoothing:
        return g.op("SoftmaxCrossEntropyLoss", *inputs, reduction_s=mode, ignore_index_i=ignore)
    return g.op(f"{DOMAIN}::SoftmaxCrossEntropyLoss", *inputs, reduction_s=mode, ignore_index_i=ignore,
                label_smoothing_f=smoothing)


def _bce_with_logits(g, input, target, weight, pos_weight, reduction):
    # loss = (1 - y) * x + (1 + (pw - 1) * y) * (log(1 + exp(-|x|)) + max(-x, 0)), pw = 1 without pos_weight
    one = g.op("Constant", value_t=torch.tensor(1.0))
    log_term = g.op("Add", g.op("Softplus", g.op("Neg", g.op("Abs", input))), g.op("Relu", g.op("Neg", input)))
    linear = g.op("Mul", g.op("Sub", one, target), input)
    if sh._is_none(pos_weight):
        loss = g.op("Add", linear, log_term)
    else:
        scale = g.op("Add", one, g.op("Mul", g.op("Sub", pos_weight, one), target))
        loss = g.op("Add", linear, g.op("Mul", scale, log_term))
    if not sh._is_none(weight):
        loss = g.op("Mul", loss, weight)
    return _reduce(g, loss, reduction)


def _adaptive_avg_pool(g, input, output_size):
    sizes = sh._maybe_get_const(output_size, "is")
    if not isinstance(sizes, (list, tuple)):
        sizes = [sizes]
    sizes = [-1 if s is None else int(s) for s in sizes]
    if all(s == 1 for s in sizes):
        return g.op("GlobalAveragePool", input)
    # torch's own symbolic needs a static input size; every dim is dynamic here.
    return g.op(f"{DOMAIN}::AdaptiveAveragePool", input, output_size_i=sizes)


_SYMBOLICS = {
    "aten::mse_loss": _mse_loss,
    "aten::l1_loss": _l1_loss,
    "aten::cross_entropy_loss": _cross_entropy,
    "aten::binary_cross_entropy_with_logits": _bce_with_logits,
    "aten::adaptive_avg_pool1d": _adaptive_avg_pool,
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten::adaptive_avg_pool3d": _adaptive_avg_pool,
}


@contextlib.contextmanager
def registered(opset):
    for name, fn in _SYMBOLICS.items():
        torch.onnx.register_custom_op_symbolic(name, fn, opset)
    try:
        yield
    finally:
        for name in _SYMBOLICS:
            torch.onnx.unregister_custom_op_symbolic(name, opset)
