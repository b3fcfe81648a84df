"""Custom torch.autograd.Functions in the engine's graph.

Capture: each Function.apply becomes one ai.onnxtrain::PythonOp node (src/ops/python/python_op.h)
with the Function's tensor arguments as inputs (capture/torchscript/functions.py). Its class and
non-tensor arguments stay here, as a FunctionSpec under the node's function_key.

Run: the engine calls forward() and backward() below through the bridge of
src/bindings/python_op_bridge.cc, holding the GIL only for the call. forward applies the Function
on the engine's tensors (zero-copy views) with PyTorch's own autograd machinery, so ctx is the real
one: save_for_backward, needs_input_grad, mark_non_differentiable, mark_dirty,
set_materialize_grads and attributes behave as in eager. backward runs the user's backward through
torch.autograd.grad on that one recorded node."""
import itertools
import uuid
import weakref

import torch

_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack

# ---- what an application is: its Function class and its non-tensor arguments ----

_CONSTANT_TYPES = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


class UnsupportedFunction(RuntimeError):
    """A Function application the engine cannot run as it is (the export's error)."""


def check_constant(cls_name, position, value):
    if isinstance(value, _CONSTANT_TYPES):
        return
    if isinstance(value, (tuple, list, torch.Size)):
        for v in value:
            check_constant(cls_name, position, v)
        return
    kind = "a tensor inside a container" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
    raise UnsupportedFunction(
        f"the autograd.Function {cls_name} receives {kind} as argument {position}: onnxtrain passes tensors, "
        "numbers, strings, None, dtypes and tuples or lists of those to a Function it runs in its graph")


class FunctionSpec:
    """One application site: the class, and how to rebuild its argument list from the node's
    tensor inputs (("tensor", k) or ("constant", value) per argument)."""

    def __init__(self, cls, template):
        self.cls = cls
        self.template = template

    @property
    def name(self):
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def arguments(self, tensors):
        return [tensors[ref] if kind == "tensor" else ref for kind, ref in self.template]


def split_arguments(cls, args):
    """(FunctionSpec, tensors) of one cls.apply(*args): the tensor arguments, and how to rebuild the
    argument list from them (the other arguments are constants of the graph)."""
    name = qualified_name(cls)
    template, tensors = [], []
    for position, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            template.append(("tensor", len(tensors)))
            tensors.append(a)
        else:
            check_constant(name, position, a)
            template.append(("constant", a))
    return FunctionSpec(cls, template), tensors


def qualified_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


# ---- run: the bridge's callbacks ----

_functions = {}  # function_key -> FunctionSpec, for the graphs alive in this process
_calls = {}      # context id -> _Call, from forward until backward or release
_call_ids = itertools.count()


def new_function_key():
    """A key for one Function application in an exported graph, unique across processes: exports
    run in forked children, whose counters all start alike and whose pids the kernel reuses, so a
    pid and a counter named two graphs' Functions alike in a long session, and one graph ran the
    other's Function."""
    return uuid.uuid4().hex


def register(functions, owner):
    """Makes `functions` (key -> FunctionSpec) runnable for as long as `owner` lives."""
    _functions.update(functions)
    weakref.finalize(owner, _unregister, list(functions))


def _unregister(keys):
    for k in keys:
        _functions.pop(k, None)


class _Call:
    __slots__ = ("spec", "outputs", "leaves")

    def __init__(self, spec, outputs, leaves):
        self.spec = spec
        self.outputs = outputs
        self.leaves = leaves


def _tensor(capsule, is_bool):
    t = _from_dlpack(capsule)
    return t.view(torch.bool) if is_bool else t


def _capsule(t):
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.view(torch.uint8)
    return _to_dlpack(t.contiguous())


def forward(key, capsules, bool_inputs, requires_grad, dirty):
    """Runs the Function of `key` on the engine's tensors. Returns (output capsules, positions of
    bool outputs, context id)."""
    spec = _functions.get(key)
    if spec is None:
        raise RuntimeError(f"onnxtrain: the autograd.Function of PythonOp {key!r} is not registered in this process "
                           "(the model was exported in another process)")
    bools = set(bool_inputs)
    views = [None if c is None else _tensor(c, i in bools) for i, c in enumerate(capsules)]
    grad = any(requires_grad)
    # The engine calls from inside ORTModuleFunction.forward, where autograd is off; eager applies
    # the Function with it on whenever an input requires grad.
    with torch.enable_grad() if grad else torch.no_grad():
        arguments, leaves, versions = [], [], []
        for i, v in enumerate(views):
            leaf = v.requires_grad_(True) if requires_grad[i] else v
            leaves.append(leaf if requires_grad[i] else None)
            # An input the Function modifies in place gets a copy: the engine's buffer may have other readers.
            arguments.append(leaf.clone() if dirty[i] else leaf)
            versions.append(None if dirty[i] else v._version)
        raw = spec.cls.apply(*spec.arguments(arguments))
    outputs = raw if isinstance(raw, tuple) else (raw,)
    for i, v in enumerate(views):
        if versions[i] is not None and v._version != versions[i]:
            raise RuntimeError(
                f"onnxtrain: the autograd.Function {spec.name} modified its input {i} in place, which it did not "
                "when the model was exported; call ctx.mark_dirty on it consistently")
    for k, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            raise RuntimeError(f"onnxtrain: the autograd.Function {spec.name} returned a {type(o).__name__} as output "
                               f"{k}; it returned a tensor when the model was exported")
    context = -1
    if grad:
        context = next(_call_ids)
        _calls[context] = _Call(spec, outputs, leaves)
    return [_capsule(o) for o in outputs], [k for k, o in enumerate(outputs) if o.dtype == torch.bool], context


def backward(context, capsules):
    """Runs the user's backward for `context` on the output gradients (None where none reached).
    Returns one capsule per input, None where the Function gave no gradient."""
    call = _calls.pop(context, None)
    if call is None:
        raise RuntimeError("onnxtrain: internal error: the context of this autograd.Function call is gone "
                           "(backward ran twice?)")
    grads = [None if c is None else _from_dlpack(c) for c in capsules]
    roots, root_grads = [], []
    for o, g in zip(call.outputs, grads):
        if g is not None and o.requires_grad:
            roots.append(o)
            root_grads.append(g)
    wanted = [leaf for leaf in call.leaves if leaf is not None]
    result = [None] * len(call.leaves)
    if roots and wanted:
        found = torch.autograd.grad(roots, wanted, root_grads, allow_unused=True)
        found = iter(found)
        for i, leaf in enumerate(call.leaves):
            if leaf is not None:
                result[i] = next(found)
    return [None if g is None else _capsule(g) for g in result]


def release(context):
    _calls.pop(context, None)
