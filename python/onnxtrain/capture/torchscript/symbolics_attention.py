"""scaled_dot_product_attention for the TorchScript exporter of every torch 2.x (merged into
_symbolics' table), in place of torch's own, which:

- in torch 2.0 to 2.4 cannot make a constant of an explicit scale (HF's ViT, T5 and most attention
  code pass one as a Python float: "z_(): incompatible function arguments");
- in torch 2.5 and later casts such a scale to a bfloat16 query's type with ONNX type 15
  (complex128: c10's number for bfloat16), so BERT under bfloat16 autocast failed to export;
- makes dropout_p > 0 an inference-mode Dropout, which drops nothing, while eager drops whatever
  the module's mode (the engine's Dropout draws it here, in training mode);
- scales both Q and K^T by sqrt(scale): two elementwise passes and their gradients, and two
  roundings in a 16-bit type, where one Mul scales the product.

softmax(Q K^T * scale + mask) V, with a bool mask as 0 / -inf (a row with nothing to attend to is
NaN in torch 2.0 to 2.4 and zero weights from 2.5 on, as eager's) and is_causal as the lower-left triangle of L x S. With enable_gqa, each key and value head serves as many
query heads in a row (torch's repeat_interleave over the head dim).
"""
import math

import torch

from . import torch_onnx
from .symbolics_int_random import _dtype, _onnx_type

sh = torch_onnx.symbolic_helper


def _constant(g, value, dtype=torch.float32):
    return g.op("Constant", value_t=torch.tensor(value, dtype=dtype))


def _dim(g, x, axis):
    """x.shape[axis] as a 1-element int64 tensor."""
    return g.op("Gather", g.op("Shape", x), _constant(g, [axis], torch.int64), axis_i=0)


def _causal_mask(g, query, key):
    """[L, S] bool: key position j visible from query position i where j <= i (torch's tril)."""
    zero, one = _constant(g, 0, torch.int64), _constant(g, 1, torch.int64)
    rows = g.op("Range", zero, g.op("Squeeze", _dim(g, query, -2), _constant(g, [0], torch.int64)), one)
    cols = g.op("Range", zero, g.op("Squeeze", _dim(g, key, -2), _constant(g, [0], torch.int64)), one)
    return g.op("LessOrEqual", g.op("Unsqueeze", cols, _constant(g, [0], torch.int64)),
                g.op("Unsqueeze", rows, _constant(g, [1], torch.int64)))


def _shared_heads(g, x, query, rank):
    """x [..., H, S, E] with each of its H heads repeated for Hq / H query heads in a row: x gets a
    repeat axis after its heads, is expanded along it and merged back into the head axis."""
    heads, query_heads = _dim(g, x, -3), _dim(g, query, -3)
    repeats = g.op("Div", query_heads, heads)
    widened = g.op("Unsqueeze", x, _constant(g, [rank - 2], torch.int64))
    leading = g.op("Slice", g.op("Shape", x), _constant(g, [0], torch.int64), _constant(g, [rank - 2], torch.int64))
    trailing = g.op("Slice", g.op("Shape", x), _constant(g, [rank - 2], torch.int64), _constant(g, [rank], torch.int64))
    expanded = g.op("Expand", widened, g.op("Concat", leading, repeats, trailing, axis_i=0))
    merged_shape = g.op("Concat", g.op("Slice", g.op("Shape", x), _constant(g, [0], torch.int64),
                                       _constant(g, [rank - 3], torch.int64)), query_heads, trailing, axis_i=0)
    return g.op("Reshape", expanded, merged_shape)


def _scaled_dot_product_attention(g, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                  scale=None, enable_gqa=False):
    dropout = sh._maybe_get_const(dropout_p, "f")
    causal = sh._maybe_get_const(is_causal, "b")
    gqa = sh._maybe_get_const(enable_gqa, "b")
    if not isinstance(dropout, float) or not isinstance(causal, (bool, int)) or not isinstance(gqa, (bool, int)):
        raise torch_onnx.SymbolicValueError(
            "scaled_dot_product_attention: dropout_p, is_causal and enable_gqa must be constants", query)
    rank = sh._get_tensor_rank(key)
    if rank is None:
        raise torch_onnx.SymbolicValueError("scaled_dot_product_attention: the key's rank is unknown", key)
    if gqa:
        if rank < 3:
            raise torch_onnx.SymbolicValueError("scaled_dot_product_attention: enable_gqa needs a head axis", key)
        key, value = _shared_heads(g, key, query, rank), _shared_heads(g, value, query, rank)
    dtype = _dtype(query) or torch.float32
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = g.op("MatMul", query, g.op("Transpose", key, perm_i=perm))
    if sh._is_none(scale):
        head_size = g.op("Cast", _dim(g, query, -1), to_i=_onnx_type(dtype))
        factor = g.op("Div", _constant(g, 1.0, dtype), g.op("Sqrt", head_size))
    else:
        factor = _constant(g, float(sh._maybe_get_const(scale, "f")), dtype)
    scores = g.op("Mul", scores, factor)
    if causal:
        if not sh._is_none(attn_mask):
            raise torch_onnx.SymbolicValueError("scaled_dot_product_attention: is_causal with an attn_mask", query)
        attn_mask = _causal_mask(g, query, key)
    if not sh._is_none(attn_mask):
        if causal or _dtype(attn_mask) == torch.bool:
            attn_mask = g.op("Where", attn_mask, _constant(g, 0.0, dtype), _constant(g, -math.inf, dtype))
        scores = g.op("Add", scores, attn_mask)
    if not sh._is_none(attn_mask) and not causal and _zeroes_rows_that_see_nothing():
        # torch 2.5 and later give a query position that the mask lets see no key (its scores all
        # -inf) zero weights and a zero gradient, where the softmax of such a row is NaN each way:
        # the softmax runs on zeros there and its result is zeroed. A NaN score still propagates.
        zero, lowest = _constant(g, 0.0, dtype), _constant(g, -math.inf, dtype)
        sees_nothing = g.op("Equal", g.op("ReduceMax", scores, axes_i=[-1], keepdims_i=1), lowest)
        weights = g.op("Where", sees_nothing, zero,
                       g.op("Softmax", g.op("Where", sees_nothing, zero, scores), axis_i=-1))
    else:
        weights = g.op("Softmax", scores, axis_i=-1)
    if dropout > 0:
        # With its mask output, which the engine's Dropout gradient reads.
        weights, _ = g.op("Dropout", weights, _constant(g, dropout), _constant(g, True, torch.bool), outputs=2)
    return g.op("MatMul", weights, value)


def _zeroes_rows_that_see_nothing():
    """Eager's scaled_dot_product_attention since torch 2.5 (2.0 to 2.4 give such a row NaN)."""
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())
    return version >= (2, 5)


def _has_attention():
    """torch 2.0 and later (1.13 has no scaled_dot_product_attention)."""
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


SYMBOLICS = {"aten::scaled_dot_product_attention": _scaled_dot_product_attention} if _has_attention() else {}
