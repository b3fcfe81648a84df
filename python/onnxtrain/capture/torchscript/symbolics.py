"""ONNX symbolics that torch 1.13 lacks or gets wrong for training, registered only while
onnxtrain exports:

- mse_loss and l1_loss have no symbolic at all;
- cross_entropy with label_smoothing is refused, so it becomes onnxtrain's own
  SoftmaxCrossEntropyLoss, which takes a label_smoothing attribute; an ignore_index known only at
  run time (a traced tensor size) is masked with graph ops, since ONNX takes it as an attribute;
- binary_cross_entropy_with_logits exports as log(sigmoid(x)), which overflows for large
  logits, so it becomes the stable form max(x, 0) - x*y + log(1 + exp(-|x|));
- adaptive_avg_pool needs a static input size, and every dim is dynamic here, so it becomes
  onnxtrain's AdaptiveAveragePool (or GlobalAveragePool for output size 1);
- torch.max(x, dim) and torch.min(x, dim) export as ReduceMax/ReduceMin beside ArgMax/ArgMin, whose
  gradient splits among ties, while PyTorch sends all of it to the returned index: the values
  become GatherElements(x, ArgMax(x)), whose gradient goes exactly there;
- logsigmoid exports as Log(Sigmoid(x)), whose gradient is NaN where sigmoid underflows: it
  becomes -Softplus(-x), which is finite everywhere, as PyTorch's own kernel is;
- gelu exports as five elementwise ops whose training graph stashes four intermediates per
  call; it becomes onnxtrain's Gelu, whose gradient reads only its input;
- silu exports as Mul(x, Sigmoid(x)), whose training graph stashes x and sigmoid(x): it becomes
  onnxtrain's Silu, whose gradient reads only x;
- mish exports as Mul(x, Tanh(Softplus(x))), whose training graph stashes three values: it
  becomes onnxtrain's Mish, whose gradient reads only x;
- x.bernoulli_(p) (torchvision's stochastic depth) reaches torch's bernoulli symbolic with p in
  the generator's place and is refused; it becomes ONNX Bernoulli of p filled to x's shape
  (torch.bernoulli(probs) becomes Bernoulli(probs)), drawn by the engine from the run's seed;
- relu6 and hardtanh export as a Clip, whose gradient is 1 at its bounds where eager's is 0 (and
  torch 2.x drops the Relu before relu6's Clip that 1.13 writes): both become onnxtrain's HardTanh;
- x.detach() exports as nothing, so the engine would differentiate through the value the user cut
  off from autograd: it becomes onnxtrain's StopGradient (Y = X, no gradient);
- max_unpool1d/2d/3d have no symbolic: ONNX MaxUnpool's indices address the whole tensor where
  torch's address one image plane, so they become a ScatterElements along the flattened planes.
"""
import contextlib

import torch

from . import symbolics_attention, symbolics_int_random, torch_onnx
from .. import engine_ops

sh = torch_onnx.symbolic_helper
opset9 = torch_onnx.opset9

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
    if sh._is_value(ignore):
        return _cross_entropy_ignoring_at_run_time(g, input, target, weight, mode, ignore, smoothing)
    inputs = [input, target] if sh._is_none(weight) else [input, target, weight]
    return _softmax_cross_entropy(g, inputs, mode, smoothing, ignore_index_i=ignore)


def _softmax_cross_entropy(g, inputs, mode, smoothing, **ignore_index):
    if not smoothing:
        return g.op("SoftmaxCrossEntropyLoss", *inputs, reduction_s=mode, **ignore_index)
    return g.op(f"{DOMAIN}::SoftmaxCrossEntropyLoss", *inputs, reduction_s=mode, label_smoothing_f=smoothing,
                **ignore_index)


def _cross_entropy_ignoring_at_run_time(g, input, target, weight, mode, ignore, smoothing):
    """ignore_index is a graph value (taken from a traced tensor size, say), while ONNX takes it
    only as an attribute: the loss runs unreduced on the targets with the ignored ones replaced by
    class 0, and the ignored positions are masked out here. "mean" divides by the summed target
    weights of the kept positions (their count without weights), as PyTorch does."""
    scalar_shape = g.op("Constant", value_t=torch.tensor([], dtype=torch.long))
    ignore = g.op("Reshape", g.op("Cast", ignore, to_i=sh.cast_pytorch_to_onnx["Long"]), scalar_shape)
    keep = g.op("Not", g.op("Equal", target, ignore))
    safe_target = g.op("Where", keep, target, g.op("Constant", value_t=torch.tensor(0, dtype=torch.long)))
    inputs = [input, safe_target] if sh._is_none(weight) else [input, safe_target, weight]
    loss = _softmax_cross_entropy(g, inputs, "none", smoothing)
    zero = g.op("CastLike", g.op("Constant", value_t=torch.tensor(0.0)), loss)
    loss = g.op("Where", keep, loss, zero)
    if mode == "none":
        return loss
    total = g.op("ReduceSum", loss, keepdims_i=0)
    if mode == "sum":
        return total
    if sh._is_none(weight):
        kept_weight = g.op("CastLike", keep, loss)
    else:
        kept_weight = g.op("Where", keep, g.op("Gather", weight, safe_target, axis_i=0), zero)
    return g.op("Div", total, g.op("ReduceSum", kept_weight, keepdims_i=0))


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


def _bernoulli(g, input, *args):
    # (input, generator[, out]) for torch.bernoulli(probs); (input, p, generator) for
    # input.bernoulli_(p) after torch turned the in-place op into this one.
    if len(args) >= 2 and not sh._is_none(args[0]) and sh._is_constant(args[0]) and \
            isinstance(sh._maybe_get_const(args[0], "f"), float):
        p = sh._maybe_get_const(args[0], "f")
        dtype = sh._try_get_scalar_type(input) or "Float"
        fill = torch.tensor([p], dtype=torch_onnx.dtype_of_scalar_type(dtype))
        probs = g.op("ConstantOfShape", g.op("Shape", input), value_t=fill)
        return g.op("Bernoulli", probs)
    return g.op("Bernoulli", input)


def _log_sigmoid(g, input):
    return g.op("Neg", g.op("Softplus", g.op("Neg", input)))


def _extremum_along(arg_op, reduce_fallback):
    def symbolic(g, self, dim_or_y=None, keepdim=None):
        if keepdim is None:  # torch.max(x) or torch.max(x, other): torch's own symbolic
            return reduce_fallback(g, self, dim_or_y, keepdim)
        dim = sh._get_const(dim_or_y, "i", "dim")
        keep = sh._get_const(keepdim, "i", "keepdim")
        indices = g.op(arg_op, self, axis_i=dim, keepdims_i=1)
        values = g.op("GatherElements", self, indices, axis_i=dim)
        if not keep:
            axes = g.op("Constant", value_t=torch.tensor([dim], dtype=torch.long))
            values = g.op("Squeeze", values, axes)
            indices = g.op("Squeeze", indices, axes)
        return values, indices

    return symbolic


def _max_unpool(g, input, indices, output_size, *stride_and_padding):
    # torch's indices address one image plane of the output (whose size torch always passes,
    # often traced from a tensor's shape), so the unpooling is a scatter along the flattened
    # planes: its gradient gathers dY back.
    def const(values):
        return g.op("Constant", value_t=torch.tensor(values, dtype=torch.long))

    def size_of(value):
        size = sh._maybe_get_const(value, "i")
        if isinstance(size, int):
            return const([size])
        return g.op("Reshape", g.op("Cast", value, to_i=sh.cast_pytorch_to_onnx["Long"]), const([1]))

    sizes = sh._maybe_get_const(output_size, "is")
    if isinstance(sizes, (list, tuple)):
        sizes = const([int(s) for s in sizes])
    else:
        sizes = g.op("Concat", *[size_of(v) for v in sh._unpack_list(output_size)], axis_i=0)
    plane = g.op("ReduceProd", sizes, keepdims_i=1)
    batch_and_channels = g.op("Slice", g.op("Shape", input), const([0]), const([2]))
    flat_shape = g.op("Concat", batch_and_channels, const([-1]), axis_i=0)
    zeros = g.op("CastLike", g.op("ConstantOfShape", g.op("Concat", batch_and_channels, plane, axis_i=0),
                                  value_t=torch.tensor([0.0])), input)
    out = g.op("ScatterElements", zeros, g.op("Reshape", indices, flat_shape), g.op("Reshape", input, flat_shape),
               axis_i=2)
    return g.op("Reshape", out, g.op("Concat", batch_and_channels, sizes, axis_i=0))


@sh.parse_args("v", "i", "i", "v", "v")
def _diff(g, x, n, dim, prepend, append):
    """torch.diff (HF's masks since transformers 5 call it on position ids): prepend and append
    joined along dim, then n times the difference of neighbours (xor for bool, as torch)."""
    parts = [v for v in (prepend, x, append) if not sh._is_none(v)]
    if len(parts) > 1:
        x = g.op("Concat", *parts, axis_i=dim)
    const = lambda values: g.op("Constant", value_t=torch.tensor(values, dtype=torch.int64))
    axes, boolean = const([dim]), symbolics_int_random._dtype(x) == torch.bool
    for _ in range(n):
        later = g.op("Slice", x, const([1]), const([2**63 - 1]), axes)
        earlier = g.op("Slice", x, const([0]), const([-1]), axes)
        x = g.op("Xor" if boolean else "Sub", later, earlier)
    return x


_SYMBOLICS = {
    "aten::diff": _diff,
    "aten::max_unpool2d": _max_unpool,
    "aten::max_unpool3d": _max_unpool,
    "aten::log_sigmoid": _log_sigmoid,
    "aten::bernoulli": _bernoulli,
    "aten::max": _extremum_along("ArgMax", opset9.max),
    "aten::min": _extremum_along("ArgMin", opset9.min),
    "aten::mse_loss": _mse_loss,
    "aten::l1_loss": _l1_loss,
    "aten::cross_entropy_loss": _cross_entropy,
    "aten::binary_cross_entropy_with_logits": _bce_with_logits,
    "aten::adaptive_avg_pool1d": _adaptive_avg_pool,
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten::adaptive_avg_pool3d": _adaptive_avg_pool,
}


def _engine_symbolic(op):
    """The symbolic of an ATen op that becomes an engine op (capture/engine_ops.py)."""
    kinds = {str: "s", float: "f", int: "i"}

    def constant(value, type_, name):
        return value if isinstance(value, type_) else type_(sh._get_const(value, kinds[type_], name))

    def symbolic(g, x, *args):
        values = engine_ops.attributes(op, args, {}, constant)
        return g.op(f"{DOMAIN}::{op.op_type}", x, **{f"{k}_{kinds[type(v)]}": v for k, v in values.items()})

    return symbolic


_SYMBOLICS.update({f"aten::{name}": _engine_symbolic(op) for name, op in engine_ops.ENGINE_OPS.items()})
_SYMBOLICS.update(symbolics_int_random.SYMBOLICS)
_SYMBOLICS.update(symbolics_attention.SYMBOLICS)


@contextlib.contextmanager
def registered(opset):
    for name, fn in _SYMBOLICS.items():
        torch_onnx.register_custom_op_symbolic(name, fn, opset)
    try:
        yield
    finally:
        for name in _SYMBOLICS:
            torch_onnx.unregister_custom_op_symbolic(name, opset)
