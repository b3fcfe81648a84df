"""scaled_dot_product_attention for the TorchScript exporter of torch 2.0 to 2.4 (merged into
_symbolics' table there; later torch exports it right itself):

- an explicit scale (HF's ViT, T5 and most attention code pass one) reaches torch's symbolic as a
  Python float, which it cannot make a constant of ("z_(): incompatible function arguments");
- dropout_p > 0 becomes an inference-mode Dropout, which drops nothing, while eager drops whatever
  the module's mode (the engine's Dropout draws it here, in training mode).

softmax(Q K^T * scale + mask) V, with a bool mask as 0 / -inf (a row with nothing to attend to is
NaN, as eager's is in these torch versions) and is_causal as the lower-left triangle of L x S.
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


def _scaled_dot_product_attention(g, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                  scale=None):
    dropout = sh._maybe_get_const(dropout_p, "f")
    causal = sh._maybe_get_const(is_causal, "b")
    if not isinstance(dropout, float) or not isinstance(causal, (bool, int)):
        raise torch_onnx.SymbolicValueError("scaled_dot_product_attention: dropout_p and is_causal must be constants",
                                            query)
    rank = sh._get_tensor_rank(key)
    if rank is None:
        raise torch_onnx.SymbolicValueError("scaled_dot_product_attention: the key's rank is unknown", key)
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
    weights = g.op("Softmax", scores, axis_i=-1)
    if dropout > 0:
        # With its mask output, which the engine's Dropout gradient reads.
        weights, _ = g.op("Dropout", weights, _constant(g, dropout), _constant(g, True, torch.bool), outputs=2)
    return g.op("MatMul", weights, value)


def _needed():
    """torch 2.0 to 2.4: the versions with the symbolic above's faults (2.5 added enable_gqa)."""
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())
    return (2, 0) <= version < (2, 5)


SYMBOLICS = {"aten::scaled_dot_product_attention": _scaled_dot_product_attention} if _needed() else {}
