"""Symbolics for integer and random ops that torch 1.13 cannot export at opset 17, or exports
with other semantics than eager's (merged into _symbolics' table):

- &, |, ^, ~ and torch.bitwise_* are refused for integers (ONNX added BitwiseAnd/Or/Xor/Not at
  opset 18): integers become onnxtrain's BitwiseAnd/Or/Xor/Not, bools ONNX's And/Or/Xor/Not;
- << and >> become 2**n products and an integer Div, which truncates where eager's arithmetic
  right shift floors (-3 >> 1 is -2): they become onnxtrain's BitShift (ONNX's is unsigned only);
- // and torch.div(rounding_mode="floor") on integers truncate (// is "deprecated behavior") or
  compare with int64 constants whatever the type: integers become onnxtrain's FloorDiv;
- torch.multinomial without replacement is refused: it becomes the top num_samples of p / E with
  E ~ Exp(1) drawn per class (the sampling PyTorch's own CPU kernel does), and with replacement
  it also takes 1-D probabilities;
- x.uniform_(a, b) has no symbolic: it becomes RandomUniformLike(x, low=a, high=b);
- amax()/amin() over all dims export an empty axes attribute, which ONNX's checker refuses;
- cumsum of an integer or bool tensor keeps its type in ONNX where eager's result is int64 (an
  int8 cumsum overflows at 128 in the export): such inputs are cast to int64 first.
"""
import torch

from . import torch_onnx

sh = torch_onnx.symbolic_helper
opset10 = torch_onnx.opset10
opset11 = torch_onnx.opset11

DOMAIN = "ai.onnxtrain"


def _dtype(value):
    scalar_type = sh._try_get_scalar_type(value)
    return None if scalar_type is None else torch_onnx.dtype_of_scalar_type(scalar_type)


def _onnx_type(dtype):
    return torch_onnx.type_utils.JitScalarType.from_dtype(dtype).onnx_type()


def _is_scalar_constant(value):
    # A Python number in a traced call becomes a 0-d constant, typed int64 or float whatever the
    # other operand's type; eager gives the result the tensor operand's type.
    return value.node().kind() in ("onnx::Constant", "prim::Constant") and sh._get_tensor_rank(value) == 0


def _promoted(g, a, b):
    """(a, b, dtype) cast to eager's result type of a binary op on them; None if unknown."""
    ta, tb = _dtype(a), _dtype(b)
    if ta is None or tb is None:
        return a, b, ta or tb
    if ta == tb:
        return a, b, ta
    if _is_scalar_constant(b) and not _is_scalar_constant(a):
        target = ta if (ta.is_floating_point or not tb.is_floating_point) else torch.promote_types(ta, tb)
    elif _is_scalar_constant(a) and not _is_scalar_constant(b):
        target = tb if (tb.is_floating_point or not ta.is_floating_point) else torch.promote_types(ta, tb)
    else:
        target = torch.promote_types(ta, tb)
    if ta != target:
        a = g.op("Cast", a, to_i=_onnx_type(target))
    if tb != target:
        b = g.op("Cast", b, to_i=_onnx_type(target))
    return a, b, target


def _is_integer(dtype):
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _bitwise(onnx_name, bool_name):
    def symbolic(g, self, other):
        a, b, dtype = _promoted(g, self, other)
        if dtype == torch.bool:
            return g.op(bool_name, a, b)
        if not _is_integer(dtype):
            raise torch_onnx.SymbolicValueError(
                f"{onnx_name} needs integer or bool operands, got {dtype}", self)
        return g.op(f"{DOMAIN}::{onnx_name}", a, b)

    return symbolic


def _bitwise_not(g, self):
    if _dtype(self) == torch.bool:
        return g.op("Not", self)
    return g.op(f"{DOMAIN}::BitwiseNot", self)


def _shift(direction, torch_symbolic):
    def symbolic(g, self, other):
        if not _is_integer(_dtype(self)):
            return torch_symbolic(g, self, other)
        # The result has self's type (a shift amount never widens it).
        if _dtype(other) != _dtype(self):
            other = g.op("Cast", other, to_i=_onnx_type(_dtype(self)))
        return g.op(f"{DOMAIN}::BitShift", self, other, direction_s=direction)

    return symbolic


def _floor_divide(g, self, other):
    a, b, dtype = _promoted(g, self, other)
    if _is_integer(dtype):
        return g.op(f"{DOMAIN}::FloorDiv", a, b)
    return opset10._floor_divide(g, self, other)


def _div(g, self, other, *args):
    if len(args) == 1 and not sh._is_none(args[0]) and sh._maybe_get_const(args[0], "s") == "floor":
        return _floor_divide(g, self, other)
    return opset10.div(g, self, other, *args)


def _multinomial(g, input, num_samples, replacement=None, generator=None):
    if generator is not None and not sh._is_none(generator):
        raise torch_onnx.SymbolicValueError("multinomial with an explicit generator is not supported", input)
    n = sh._get_const(num_samples, "i", "num_samples")
    with_replacement = bool(sh._maybe_get_const(replacement, "b"))
    rank = sh._get_tensor_rank(input)
    probs = input
    if rank == 1:
        probs = g.op("Unsqueeze", probs, g.op("Constant", value_t=torch.tensor([0], dtype=torch.long)))
    if with_replacement or n == 1:
        samples = g.op("Multinomial", g.op("Log", probs), dtype_i=_onnx_type(torch.long), sample_size_i=n)
    else:
        # Exponential races: class i's key p_i / E_i with E_i ~ Exp(1); the k largest keys are
        # k draws without replacement, in the order drawn.
        exponential = g.op("Neg", g.op("Log", g.op("RandomUniformLike", probs)))
        keys = g.op("Div", probs, exponential)
        k = g.op("Constant", value_t=torch.tensor([n], dtype=torch.long))
        _, samples = g.op("TopK", keys, k, axis_i=-1, largest_i=1, sorted_i=1, outputs=2)
    if rank == 1:
        samples = g.op("Squeeze", samples, g.op("Constant", value_t=torch.tensor([0], dtype=torch.long)))
    return samples


def _uniform(g, self, low, high, generator=None):
    if generator is not None and not sh._is_none(generator):
        raise torch_onnx.SymbolicValueError("uniform_ with an explicit generator is not supported", self)
    return g.op("RandomUniformLike", self, low_f=sh._get_const(low, "f", "from"),
                high_f=sh._get_const(high, "f", "to"))


def _extremum(onnx_op):
    # amax()/amin() over every dim: torch writes an empty axes attribute, which ONNX refuses.
    def symbolic(g, self, dim, keepdim):
        dims = sh._get_const(dim, "is", "dim")
        keep = sh._get_const(keepdim, "i", "keepdim")
        if not dims:
            return g.op(onnx_op, self, keepdims_i=keep)
        return g.op(onnx_op, self, axes_i=dims, keepdims_i=keep)

    return symbolic


def _cumsum(g, self, dim, dtype=None):
    if (dtype is None or sh._is_none(dtype)) and (_is_integer(_dtype(self)) or _dtype(self) == torch.bool) \
            and _dtype(self) != torch.long:
        self = g.op("Cast", self, to_i=_onnx_type(torch.long))
    return opset11.cumsum(g, self, dim, dtype)


SYMBOLICS = {
    "aten::cumsum": _cumsum,
    "aten::amax": _extremum("ReduceMax"),
    "aten::amin": _extremum("ReduceMin"),
    "aten::__and_": _bitwise("BitwiseAnd", "And"),
    "aten::bitwise_and": _bitwise("BitwiseAnd", "And"),
    "aten::__or_": _bitwise("BitwiseOr", "Or"),
    "aten::bitwise_or": _bitwise("BitwiseOr", "Or"),
    "aten::__xor_": _bitwise("BitwiseXor", "Xor"),
    "aten::bitwise_xor": _bitwise("BitwiseXor", "Xor"),
    # mask |= other: the tracer reads the in-place op's result wherever the mask is read after it.
    "aten::__iand_": _bitwise("BitwiseAnd", "And"),
    "aten::__ior_": _bitwise("BitwiseOr", "Or"),
    "aten::__ixor_": _bitwise("BitwiseXor", "Xor"),
    "aten::bitwise_not": _bitwise_not,
    "aten::__lshift_": _shift("LEFT", opset11.__lshift_),
    "aten::__rshift_": _shift("RIGHT", opset11.__rshift_),
    "aten::bitwise_left_shift": _shift("LEFT", opset11.__lshift_),
    "aten::bitwise_right_shift": _shift("RIGHT", opset11.__rshift_),
    "aten::floor_divide": _floor_divide,
    "aten::floordiv": _floor_divide,
    "aten::div": _div,
    "aten::multinomial": _multinomial,
    "aten::uniform": _uniform,
}
