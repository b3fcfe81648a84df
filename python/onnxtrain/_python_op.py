"""Custom torch.autograd.Functions in the engine's graph.

Export: each Function.apply becomes one ai.onnxtrain::PythonOp node (src/ops/python/python_op.h)
with the Function's tensor arguments as inputs. Its class and non-tensor arguments stay here,
under the node's function_key. Before emitting the node, the Function runs once off the trace to
learn its outputs' types and which of them it marks non-differentiable or which inputs it
modifies in place.

Run: the engine calls forward() and backward() below through the bridge of
src/bindings/python_op_bridge.cc, holding the GIL only for the call. forward applies the Function
on the engine's tensors (zero-copy views) with PyTorch's own autograd machinery, so ctx is the real
one: save_for_backward, needs_input_grad, mark_non_differentiable, mark_dirty,
set_materialize_grads and attributes behave as in eager. backward runs the user's backward through
torch.autograd.grad on that one recorded node."""
import itertools
import os
import weakref

import torch

_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack

# ---- what an application is: its Function class and its non-tensor arguments ----

_CONSTANT_TYPES = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


class UnsupportedFunction(RuntimeError):
    """A Function application the engine cannot run as it is (the export's error)."""


def _check_constant(cls_name, position, value):
    if isinstance(value, _CONSTANT_TYPES):
        return
    if isinstance(value, (tuple, list, torch.Size)):
        for v in value:
            _check_constant(cls_name, position, v)
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


def qualified_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


# ---- export ----

_export_ids = itertools.count()
_pending_outputs = {}

_ONNX_TYPES = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6, torch.int64: 7,
               torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}


class PythonOpNode(torch.autograd.Function):
    """Stands for one application in the trace; its symbolic writes the PythonOp node."""

    @staticmethod
    def forward(ctx, key, class_name, output_dtypes, non_differentiable, dirty, no_gradient, *tensors):
        outputs = _pending_outputs.pop(key)
        return tuple(o.clone() for o in outputs) + (torch.zeros((), dtype=torch.int64),)

    @staticmethod
    def symbolic(g, key, class_name, output_dtypes, non_differentiable, dirty, no_gradient, *tensors):
        attrs = {"function_key_s": key, "class_name_s": class_name, "output_dtypes_i": output_dtypes}
        if no_gradient:
            attrs["no_gradient_inputs_i"] = no_gradient
        if non_differentiable:
            attrs["non_differentiable_outputs_i"] = non_differentiable
        if dirty:
            attrs["dirty_inputs_i"] = dirty
        return g.op("ai.onnxtrain::PythonOp", *tensors, outputs=len(output_dtypes) + 1, **attrs)


def storages(tensors):
    """The storage addresses of `tensors`, to recognize views of them."""
    return {t.storage().data_ptr() for t in tensors if t.numel() > 0}


def export_application(cls, args, apply, functions, caller_storages=frozenset()):
    """Called for cls.apply(*args) while the module is traced: runs the Function once off the
    trace, records it in `functions` (key -> FunctionSpec) and puts one PythonOp in the trace.
    `apply` is PyTorch's own Function.apply; `caller_storages` (see storages()) are the module's
    inputs, parameters and buffers, which an in-place Function may not modify."""
    name = qualified_name(cls)
    template, tensors = [], []
    for position, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            template.append(("tensor", len(tensors)))
            tensors.append(a)
        else:
            _check_constant(name, position, a)
            template.append(("constant", a))
    spec = FunctionSpec(cls, template)
    outputs, returns_tuple, non_differentiable, dirty, dirty_outputs, no_gradient = _probe(spec, tensors, apply)
    for i in dirty:
        if tensors[i].numel() > 0 and tensors[i].storage().data_ptr() in caller_storages:
            # Eager would change the caller's own tensor; the engine's Function works on a copy.
            raise UnsupportedFunction(
                f"the autograd.Function {name} modifies its input {i} in place, which is the module's own input, "
                "parameter or buffer: onnxtrain runs in-place Functions on values computed inside the module only")
    key = f"{os.getpid()}-{id(functions)}-{next(_export_ids)}"
    functions[key] = spec
    _pending_outputs[key] = outputs
    try:
        results = PythonOpNode.apply(key, name, [_ONNX_TYPES[o.dtype] for o in outputs], non_differentiable,
                                     dirty, no_gradient, *tensors)
    finally:
        _pending_outputs.pop(key, None)
    results = list(results[:-1])  # the context output is the engine's, not the caller's
    for i, k in dirty_outputs.items():
        # As in eager, the modified input is the output, and later readers of it see the change.
        tensors[i].copy_(results[k])
        results[k] = tensors[i]
    return tuple(results) if returns_tuple else results[0]


def _probe(spec, tensors, apply):
    """Runs the Function off the trace on copies of its inputs, every floating one requiring grad:
    its outputs, whether it returns a tuple, which outputs it marks non-differentiable, and which
    inputs it modifies."""
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)  # everything here stays out of the trace
    try:
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
        copies = [leaf.clone() for leaf in leaves]
        versions = [c._version for c in copies]
        with torch.enable_grad():
            raw = apply(*spec.arguments(copies))
        outputs = raw if isinstance(raw, tuple) else (raw,)
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.Tensor):
                raise UnsupportedFunction(
                    f"the autograd.Function {spec.name} returns a {type(o).__name__} as output {k}: onnxtrain "
                    "runs Functions whose outputs are all tensors")
            if o.dtype not in _ONNX_TYPES:
                raise UnsupportedFunction(f"the autograd.Function {spec.name} returns a {o.dtype} tensor as output {k}")
        any_grad = any(leaf.requires_grad for leaf in leaves)
        non_differentiable = [k for k, o in enumerate(outputs)
                              if any_grad and o.is_floating_point() and not o.requires_grad]
        dirty = [i for i, c in enumerate(copies) if c._version != versions[i]]
        dirty_outputs = {}  # input -> the output that is that input, modified
        for i in dirty:
            returned = [k for k, o in enumerate(outputs) if o is copies[i]]
            if not returned:
                raise UnsupportedFunction(
                    f"the autograd.Function {spec.name} modifies its input {i} in place without returning it: "
                    "onnxtrain runs in-place Functions that mark the input dirty (ctx.mark_dirty) and return it")
            dirty_outputs[i] = returned[0]
        no_gradient = _inputs_without_gradient(outputs, leaves)
        detached = tuple(o.detach() for o in outputs)
    finally:
        torch._C._set_tracing_state(state)
    return detached, isinstance(raw, tuple), non_differentiable, dirty, dirty_outputs, no_gradient


def _inputs_without_gradient(outputs, leaves):
    """The inputs for which the Function's backward returns None, found by running it once on
    gradients of ones; [] when it cannot run that way. Eager leaves .grad None for a value reached
    only through such a path, so the engine must know it when it builds the gradient graph."""
    roots = [o for o in outputs if o.requires_grad]
    wanted = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
    if not roots or not wanted:
        return []
    try:
        with torch.enable_grad():
            grads = torch.autograd.grad(roots, [leaves[i] for i in wanted], [torch.ones_like(o) for o in roots],
                                        allow_unused=True)
    except Exception:  # noqa: BLE001 - a backward that needs real gradients: assume every input gets one
        return []
    return [i for i, g in zip(wanted, grads) if g is None]


# ---- run: the bridge's callbacks ----

_functions = {}  # function_key -> FunctionSpec, for the graphs alive in this process
_calls = {}      # context id -> _Call, from forward until backward or release
_call_ids = itertools.count()


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
