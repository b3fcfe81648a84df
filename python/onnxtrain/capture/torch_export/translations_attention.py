"""scaled_dot_product_attention as the engine runs it best, in place of onnxscript's, which:

- writes a dropout_p > 0 as a Dropout without its training_mode input, an inference Dropout that
  drops nothing, while eager drops in training (HF GPT-2 passes its attn_pdrop of 0.1);
- transposes K by reshaping it to rank 3 and back (a copy each way, and their gradients), and
  scales both Q and K^T by sqrt(scale): two elementwise passes and their gradients, where one
  Transpose folds into the product and one Mul scales Q, as timm's own attention does.

softmax(Q K^T scale + mask) V, a bool mask as 0 / -inf and is_causal as the lower-left triangle of
L x S. A query position that a mask lets see no key gets zero weights, as in eager (onnxscript's
bool mask, at the dtype's lowest value instead of -inf, averages all values there; a float mask's
-inf row is NaN there). With enable_gqa, each key and value head serves as many query heads in a
row (torch's repeat_interleave over the head dim).
"""
import math
from typing import Optional

from onnxscript import ir
from onnxscript import opset18 as op


def _causal_mask(query, key):
    """[L, S] bool: key position j visible from query position i where j <= i (torch's tril)."""
    zero, one = op.Constant(value_int=0), op.Constant(value_int=1)
    rows = op.Range(zero, op.Squeeze(op.Shape(query, start=-2, end=-1)), one)
    cols = op.Range(zero, op.Squeeze(op.Shape(key, start=-2, end=-1)), one)
    return op.LessOrEqual(op.Unsqueeze(cols, op.Constant(value_ints=[0])), op.Unsqueeze(rows, op.Constant(value_ints=[1])))


def _softmax_of_masked(scores, zero, lowest):
    """Softmax over the keys, where eager gives a query position that sees no key (its row all
    -inf) zero weights and a zero gradient: the softmax of such a row is NaN each way, so it runs
    on zeros there and its result is zeroed. A NaN score still propagates, as in eager."""
    sees_nothing = op.Equal(op.ReduceMax(scores, op.Constant(value_ints=[-1]), keepdims=1), lowest)
    return op.Where(sees_nothing, zero, op.Softmax(op.Where(sees_nothing, zero, scores), axis=-1))


def _shared_heads(x, query_heads):
    """x [..., H, S, E] with each of its H heads repeated for query_heads / H query heads in a row."""
    heads = x.shape[-3]
    if not isinstance(heads, int) or not isinstance(query_heads, int) or query_heads % heads:
        raise NotImplementedError(f"scaled_dot_product_attention with enable_gqa: {query_heads} query heads and "
                                  f"{heads} key/value heads, where the capture needs fixed head counts, the first a "
                                  "multiple of the second")
    if heads == query_heads:
        return x
    repeats = op.Constant(value_ints=[query_heads // heads])
    expanded = op.Concat(op.Shape(x, end=-2), repeats, op.Shape(x, start=-2), axis=0)
    grouped = op.Expand(op.Unsqueeze(x, op.Constant(value_ints=[-3])), expanded)
    merged = op.Concat(op.Shape(x, end=-3), op.Constant(value_ints=[query_heads]), op.Shape(x, start=-2), axis=0)
    return op.Reshape(grouped, merged)


def _scale(query, scale):
    if scale is not None:
        return op.CastLike(op.Constant(value_float=float(scale)), query)
    head_size = query.shape[-1]
    if isinstance(head_size, int):
        return op.CastLike(op.Constant(value_float=1.0 / math.sqrt(head_size)), query)
    size = op.CastLike(op.Shape(query, start=-1), query)
    return op.Reciprocal(op.Sqrt(size))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False):
    rank = len(key.shape)
    if enable_gqa:
        key, value = _shared_heads(key, query.shape[-3]), _shared_heads(value, query.shape[-3])
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = op.MatMul(op.Mul(query, _scale(query, scale)), op.Transpose(key, perm=perm))
    if is_causal:
        attn_mask = _causal_mask(query, key)
    if attn_mask is None:
        weights = op.Softmax(scores, axis=-1)
    else:
        zero = op.CastLike(op.Constant(value_float=0.0), query)
        lowest = op.CastLike(op.Constant(value_float=-math.inf), query)
        if is_causal or attn_mask.dtype == ir.DataType.BOOL:
            attn_mask = op.Where(attn_mask, zero, lowest)
        scores = op.Add(scores, attn_mask)
        # A causal mask leaves every query position its own key: no row is blind, and the
        # blind-row guard would only add a reduction and two selects per layer each way.
        weights = op.Softmax(scores, axis=-1) if is_causal else _softmax_of_masked(scores, zero, lowest)
    if dropout_p > 0:
        training = op.Constant(value=ir.tensor(True, dtype=ir.DataType.BOOL))
        weights, _ = op.Dropout(weights, op.Constant(value_float=float(dropout_p)), training)
    return op.MatMul(weights, value)


def table():
    import torch

    return {torch.ops.aten.scaled_dot_product_attention.default: scaled_dot_product_attention}
