"""Flattening of a module's inputs and outputs into tensor lists, and back.

A schema is a hashable tree that records everything but the tensors: containers and their
types, dict keys, None, bools and strings. Python ints and floats become 0-d tensor inputs, so a
new value does not need a new export, unless the export finds that the module's code treats the
number differently from a tensor (see capture/common.py); then numbers key the export (see ortmodule).
Two calls with the same schema and tensor signature can run the same exported graph.
"""
import torch


class UnsupportedTypeError(TypeError):
    pass


class _Flattener:
    def __init__(self, scalars_as_tensors):
        self.tensors = []
        self.scalars_as_tensors = scalars_as_tensors

    def leaf(self, t):
        self.tensors.append(t)
        return len(self.tensors) - 1

    def __call__(self, obj, path):
        if isinstance(obj, torch.Tensor):
            return ("T", self.leaf(obj))
        if obj is None:
            return ("N",)
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and self.scalars_as_tensors:
            dtype = torch.int64 if isinstance(obj, int) else torch.get_default_dtype()
            t = torch.tensor(obj, dtype=dtype)
            t._onnxtrain_python_value = obj  # the user's own number, for calls that must see it
            return ("S", type(obj), self.leaf(t))
        if isinstance(obj, (bool, int, float, str)):
            return ("C", type(obj), obj)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return ("NT", type(obj), tuple(self(v, f"{path}.{f}") for f, v in zip(obj._fields, obj)))
        if isinstance(obj, (tuple, list)):
            kind = "U" if isinstance(obj, tuple) else "L"
            return (kind, tuple(self(v, f"{path}[{i}]") for i, v in enumerate(obj)))
        if isinstance(obj, dict):
            return ("D", type(obj), tuple((k, self(v, f"{path}[{k!r}]")) for k, v in obj.items()))
        raise UnsupportedTypeError(
            f"onnxtrain cannot pass {path} of type {type(obj).__qualname__}: supported are tensors, None, "
            "bool, int, float, str and lists, tuples, dicts and namedtuples of them" + _hint(obj))


def _hint(obj):
    cls = type(obj)
    if cls.__module__.startswith("transformers") and cls.__name__.endswith("Cache"):
        # A key/value cache is for generation; training does not read it.
        return (". It is a HuggingFace key/value cache, which a training step does not need: call the model with "
                "use_cache=False, or set model.config.use_cache = False")
    return ""


def _unflatten(node, tensors, python_scalars=False):
    kind = node[0]
    if kind == "T":
        return tensors[node[1]]
    if kind == "S":  # a Python number given to the exporter as a 0-d tensor
        t = tensors[node[2]]
        return python_number(t, node[1]) if python_scalars else t
    if kind == "N":
        return None
    if kind == "C":
        return node[2]
    if kind == "NT":
        return node[1](*(_unflatten(c, tensors, python_scalars) for c in node[2]))
    if kind == "U":
        return tuple(_unflatten(c, tensors, python_scalars) for c in node[1])
    if kind == "L":
        return [_unflatten(c, tensors, python_scalars) for c in node[1]]
    if kind == "D":
        return node[1]((k, _unflatten(c, tensors, python_scalars)) for k, c in node[2])
    raise AssertionError(f"bad schema node {node!r}")


def python_number(t, number_type):
    """The Python number a 0-d scalar input stands for: the user's own object where the tensor
    still carries it (so a float keeps its double value), else the tensor's value."""
    value = getattr(t, "_onnxtrain_python_value", None)
    return value if value is not None else number_type(t.item())


_ALL_TENSOR_SCHEMAS = {}  # number of arguments -> the schema of that many positional tensors


def flatten_inputs(args, kwargs, scalars_as_tensors=True):
    """Returns (tensors, schema) for a call module(*args, **kwargs). Keyword arguments are keyed
    by name, so their order in the call does not matter."""
    if not kwargs and all(type(a) is torch.Tensor for a in args):  # the common call, on every step
        schema = _ALL_TENSOR_SCHEMAS.get(len(args))
        if schema is None:
            schema = _ALL_TENSOR_SCHEMAS[len(args)] = (tuple(("T", i) for i in range(len(args))), ())
        return list(args), schema
    flat = _Flattener(scalars_as_tensors)
    arg_nodes = tuple(flat(a, f"argument {i}") for i, a in enumerate(args))
    kwarg_nodes = tuple((k, flat(kwargs[k], f"keyword argument {k!r}")) for k in sorted(kwargs))
    return flat.tensors, (arg_nodes, kwarg_nodes)


def unflatten_inputs(schema, tensors, python_scalars=False):
    """The call's (args, kwargs) again. python_scalars: the Python numbers themselves, as the user
    passed them, instead of the 0-d tensors that stand for them in the graph."""
    arg_nodes, kwarg_nodes = schema
    args = [_unflatten(n, tensors, python_scalars) for n in arg_nodes]
    kwargs = {k: _unflatten(n, tensors, python_scalars) for k, n in kwarg_nodes}
    return args, kwargs


def scalar_positions(schema):
    """Indices of the flat tensors that stand for Python numbers."""
    out = []

    def walk(node):
        kind = node[0]
        if kind == "S":
            out.append(node[2])
        elif kind in ("U", "L"):
            for c in node[1]:
                walk(c)
        elif kind == "NT":
            for c in node[2]:
                walk(c)
        elif kind == "D":
            for _, c in node[2]:
                walk(c)

    for n in schema[0]:
        walk(n)
    for _, n in schema[1]:
        walk(n)
    return out


def flatten_outputs(out):
    flat = _Flattener(scalars_as_tensors=False)
    schema = flat(out, "output")
    return flat.tensors, schema


def unflatten_outputs(schema, tensors):
    return _unflatten(schema, tensors)


def tensor_paths(schema):
    """Where each flat input tensor came from, as a user would name it: "argument 0",
    "keyword argument 'mask'[1]"."""
    paths = {}

    def walk(node, path):
        kind = node[0]
        if kind == "T":
            paths[node[1]] = path
        elif kind == "S":
            paths[node[2]] = path
        elif kind in ("U", "L"):
            for i, c in enumerate(node[1]):
                walk(c, f"{path}[{i}]")
        elif kind == "NT":
            for f, c in zip(node[1]._fields, node[2]):
                walk(c, f"{path}.{f}")
        elif kind == "D":
            for k, c in node[2]:
                walk(c, f"{path}[{k!r}]")

    arg_nodes, kwarg_nodes = schema
    for i, n in enumerate(arg_nodes):
        walk(n, f"argument {i}")
    for k, n in kwarg_nodes:
        walk(n, f"keyword argument {k!r}")
    return [paths.get(i, f"input {i}") for i in range(len(paths))]


def tensor_signature(tensors):
    """What of the tensors themselves decides whether an exported graph still fits them."""
    return tuple((t.dtype, t.dim()) for t in tensors)


try:  # torch 2.4+ asks per device type
    torch.is_autocast_enabled("cpu")

    def autocast_state():
        """The autocast settings a trace bakes in (an export under autocast holds its casts), as
        part of what keys a call's graphs; () when autocast is off."""
        return tuple((device, torch.get_autocast_dtype(device)) for device in ("cpu", "cuda")
                     if torch.is_autocast_enabled(device))
except TypeError:
    def autocast_state():
        """The autocast settings a trace bakes in (an export under autocast holds its casts), as
        part of what keys a call's graphs; () when autocast is off."""
        state = ()
        if torch.is_autocast_cpu_enabled():
            state += (("cpu", torch.get_autocast_cpu_dtype()),)
        if torch.is_autocast_enabled():
            state += (("cuda", torch.get_autocast_gpu_dtype()),)
        return state


def call_signature(tensors):
    """What decides whether an exported graph still fits a call, beside its input structure: the
    tensors' dtypes and ranks, and autocast."""
    return tensor_signature(tensors), autocast_state()
