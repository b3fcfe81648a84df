"""Integer division and max/min along a dim as the TorchScript capture writes them
(capture/torchscript/symbolics*.py), in place of onnxscript's, which the suite found to differ
from eager.

- Floor division of integers is the engine's FloorDiv (ONNX's integer Div truncates), which
  raises on a zero divisor as eager does; remainder is a - FloorDiv(a, b) * b, fmod a - Div(a, b) * b
  with ONNX's truncating Div. Floats get eager's formulas and gradients: floor(a / b),
  a - floor(a / b) * b and a - trunc(a / b) * b.
- Shifts are the engine's BitShift, arithmetic on signed types (ONNX's is unsigned only).
- torch.max(x, dim) and torch.min(x, dim) send the whole gradient to the returned index, where
  ReduceMax splits it among ties: the values are GatherElements(x, ArgMax(x)).

Operands of two different types are left to the fallback (the TorchScript capture promotes them).
"""
from onnxscript import opset18 as op

from . import stubs

_INTEGERS = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")


class _Unsupported(NotImplementedError):
    """An argument this translation does not write; the export fails, naming it."""


def _operands(a, b):
    """(a, b, whether integer): b a Python number becomes a constant of a's type."""
    if not hasattr(b, "dtype"):
        b = op.CastLike(op.Constant(value_int=b) if isinstance(b, int) else op.Constant(value_float=b), a)
    elif b.dtype != a.dtype:
        raise _Unsupported(f"operands of types {a.dtype} and {b.dtype}")
    return a, b, a.dtype is not None and a.dtype.name in _INTEGERS


def floor_divide(a, b):
    a, b, integer = _operands(a, b)
    if integer:
        return stubs.engine_node("FloorDiv", [a, b])
    return op.Floor(op.Div(a, b))


def div_mode(a, b, rounding_mode: str = None):
    if rounding_mode == "floor":
        return floor_divide(a, b)
    a, b, integer = _operands(a, b)
    if rounding_mode == "trunc":
        return op.Div(a, b) if integer else _truncated(op.Div(a, b))
    if integer:
        raise _Unsupported("true division of integers")
    return op.Div(a, b)


def _truncated(q):
    """trunc(q) for floats, which ONNX lacks: sign(q) floor(|q|), with a zero gradient as eager's."""
    return op.Mul(op.Sign(q), op.Floor(op.Abs(q)))


def remainder(a, b):
    a, b, integer = _operands(a, b)
    quotient = stubs.engine_node("FloorDiv", [a, b]) if integer else op.Floor(op.Div(a, b))
    return op.Sub(a, op.Mul(quotient, b))


def fmod(a, b):
    a, b, integer = _operands(a, b)
    quotient = op.Div(a, b) if integer else _truncated(op.Div(a, b))
    return op.Sub(a, op.Mul(quotient, b))


def _shift(direction):
    """x << n and x >> n: the engine's BitShift, arithmetic on signed types as eager's (ONNX's is
    unsigned only; onnxscript's right shift of uint8 returned int8). The result has x's type."""
    def translation(x, n):
        if not hasattr(n, "dtype"):
            n = op.CastLike(op.Constant(value_int=int(n)), x)
        elif n.dtype != x.dtype:
            n = op.CastLike(n, x)
        if x.dtype is None or x.dtype.name not in _INTEGERS:
            raise _Unsupported(f"a shift of {x.dtype}")
        return stubs.engine_node("BitShift", [x, n], direction=direction)

    return translation


def _extremum_along(arg_op):
    def translation(x, dim: int, keepdim: bool = False):
        indices = arg_op(x, axis=dim, keepdims=1)
        values = op.GatherElements(x, indices, axis=dim)
        if not keepdim:
            axes = op.Constant(value_ints=[dim])
            values, indices = op.Squeeze(values, axes), op.Squeeze(indices, axes)
        return values, indices

    return translation


def table():
    import torch

    aten = torch.ops.aten
    return {
        aten.floor_divide.default: floor_divide,
        aten.floor_divide.Scalar: floor_divide,
        aten.div.Tensor_mode: div_mode,
        aten.div.Scalar_mode: div_mode,
        aten.remainder.Tensor: remainder,
        aten.remainder.Scalar: remainder,
        aten.fmod.Tensor: fmod,
        aten.fmod.Scalar: fmod,
        aten.__lshift__.Tensor: _shift("LEFT"),
        aten.__lshift__.Scalar: _shift("LEFT"),
        aten.__rshift__.Tensor: _shift("RIGHT"),
        aten.__rshift__.Scalar: _shift("RIGHT"),
        aten.bitwise_left_shift.Tensor: _shift("LEFT"),
        aten.bitwise_left_shift.Tensor_Scalar: _shift("LEFT"),
        aten.bitwise_right_shift.Tensor: _shift("RIGHT"),
        aten.bitwise_right_shift.Tensor_Scalar: _shift("RIGHT"),
        aten.max.dim: _extremum_along(op.ArgMax),
        aten.min.dim: _extremum_along(op.ArgMin),
    }
