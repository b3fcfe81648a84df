"""The ATen ops that both captures write as one of the engine's own ops (domain ai.onnxtrain): one
table, from which capture/torchscript/symbolics.py builds its symbolics and
capture/torch_export/translations.py its translations. The formulas ONNX would give these ops
stash more for backward (Gelu, Silu, Mish, whose engine gradients read only the input), differ
from eager's gradient (Clip's 1 at the bounds, where HardTanh's is 0, as eager's), or do not stop
it where eager does (detach, which becomes StopGradient)."""
import inspect
import typing


class EngineOp(typing.NamedTuple):
    op_type: str
    # (name, type, default) of each ATen argument after the input, in ATen's order: the engine
    # op's attribute of the same name.
    attributes: tuple = ()
    # (name, value) of attributes the ATen op implies (relu6's bounds).
    fixed: tuple = ()


ENGINE_OPS = {
    "detach": EngineOp("StopGradient"),
    "gelu": EngineOp("Gelu", (("approximate", str, "none"),)),
    "silu": EngineOp("Silu"),
    "mish": EngineOp("Mish"),
    "hardtanh": EngineOp("HardTanh", (("min_val", float, -1.0), ("max_val", float, 1.0))),
    "relu6": EngineOp("HardTanh", fixed=(("min_val", 0.0), ("max_val", 6.0))),
}


def signature(op):
    """The ATen op's Python signature: its input x, then its attributes with their defaults."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter("x", kind)] + [
        inspect.Parameter(name, kind, default=default, annotation=type_) for name, type_, default in op.attributes])


def attributes(op, args, kwargs, read):
    """The engine node's attributes for a call with the ATen arguments after the input (`args`,
    `kwargs`, defaults filled in); read(value, type, name) turns each argument into the attribute's
    value."""
    bound = signature(op).bind(None, *args, **kwargs)
    bound.apply_defaults()
    values = dict(op.fixed)
    for name, type_, _ in op.attributes:
        values[name] = read(bound.arguments[name], type_, name)
    return values
