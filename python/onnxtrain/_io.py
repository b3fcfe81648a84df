"""Flattening of a module's inputs and outputs into tensor lists, and back.

A schema is a hashable tree that records everything but the tensors: containers and their
types, dict keys, None, bools and strings. Python ints and floats become 0-d tensor inputs, so a
new value does not need a new export, unless the export finds that the module's code treats the
number differently from a tensor (see capture/common.py); then numbers key the export (see ortmodule).
Two calls with the same schema and tensor signature can run the same exported graph.

Objects other than the plain containers (a transformers DynamicCache, a type registered with
torch.utils._pytree) are opened as _objects says. An output object that is an input object (a
cache the model updated) is the caller's own object again after the call, holding the new state.
"""
import torch

from . import _objects


class UnsupportedTypeError(TypeError):
    pass


_SYM_INT = getattr(torch, "SymInt", ())  # torch 2.x: what torch.export traces a size-derived int as


class _Flattener:
    def __init__(self, scalars_as_tensors, input_objects=None, number_attributes=frozenset(), traced_number=None):
        self.tensors = []
        self.scalars_as_tensors = scalars_as_tensors
        # Outputs only: id -> path of the objects the call's inputs were rebuilt into (an output
        # that is one of them aliases the caller's object), and the (class, attribute) pairs that
        # hold Python numbers in the inputs' objects, which outputs then return as numbers too;
        # traced_number: the capture's test of whether a 0-d integer tensor stands for a number.
        self.input_objects = input_objects or {}
        self.number_attributes = number_attributes
        self.traced_number = traced_number or (lambda t: False)

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
        if isinstance(obj, (bool, int, float, str, torch.device, torch.dtype, type)):  # a cache's device, its layers' class
            return ("C", type(obj), obj)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return ("NT", type(obj), tuple(self(v, f"{path}.{f}") for f, v in zip(obj._fields, obj)))
        if isinstance(obj, (tuple, list)):
            kind = "U" if isinstance(obj, tuple) else "L"
            return (kind, tuple(self(v, f"{path}[{i}]") for i, v in enumerate(obj)))
        if isinstance(obj, dict):
            return ("D", type(obj), tuple((k, self(v, f"{path}[{k!r}]")) for k, v in obj.items()))
        if isinstance(obj, _SYM_INT):  # a size-derived number while torch.export traces
            return ("S", int, self.leaf(torch.scalar_tensor(obj, dtype=torch.int64)))
        try:
            opened = _objects.kind(obj)
        except _objects.UnsupportedObject as e:
            raise UnsupportedTypeError(f"onnxtrain cannot pass {path}: {e}") from None
        if opened == "pytree":
            children, context = _objects.pytree_flatten(obj)
            return ("P", type(obj), _objects.Context(context),
                    tuple(self(c, f"{path}<{i}>") for i, c in enumerate(children)))
        if opened == "state":
            try:
                attributes = _objects.state(obj)
            except _objects.UnsupportedObject as e:
                raise UnsupportedTypeError(f"onnxtrain cannot pass {path}: {e}") from None
            input_object = self.input_objects.get(id(obj))
            return ("O", type(obj), input_object[0] if input_object else None,
                    tuple((name, self.attribute(type(obj), name, v, f"{path}.{name}")) for name, v in attributes))
        raise UnsupportedTypeError(
            f"onnxtrain cannot pass {path} of type {type(obj).__qualname__}: supported are tensors, None, "
            "bool, int, float, str, classes, torch.device, torch.dtype, lists, tuples, dicts and namedtuples of them, transformers' growing key/value "
            "caches and types registered with torch.utils._pytree")

    def attribute(self, cls, name, value, path):
        """An attribute of an opened object. In outputs, a number the object holds (a cache's
        count of tokens seen) comes back as the number eager computes, not as the trace's value:
        the graph returns it as a 0-d tensor where the trace saw it depend on its inputs."""
        if not self.scalars_as_tensors and not isinstance(value, bool):
            numeric_attribute = (cls, name) in self.number_attributes
            if isinstance(value, int) and numeric_attribute:
                return ("S", int, self.leaf(torch.tensor(value)))
            if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() and (
                    numeric_attribute or self.traced_number(value)):
                return ("S", int, self.leaf(value))
        return self(value, path)


class _Unflattener:
    """Rebuilds a schema's values. python_scalars: the Python numbers themselves instead of the 0-d
    tensors that stand for them. created: id -> (path, object) of every object rebuilt (for
    FlatModule, which tells outputs that are inputs, and input objects the module changed). call: the caller's (args, kwargs), whose objects an
    output that aliases one of them updates in place."""

    def __init__(self, tensors, python_scalars=False, created=None, call=None):
        self.tensors = tensors
        self.python_scalars = python_scalars
        self.created = created
        self.call = call

    def __call__(self, node, path=()):
        kind = node[0]
        if kind == "T":
            return self.tensors[node[1]]
        if kind == "S":  # a Python number given to the exporter as a 0-d tensor
            t = self.tensors[node[2]]
            return python_number(t, node[1]) if self.python_scalars else t
        if kind == "N":
            return None
        if kind == "C":
            return node[2]
        if kind == "NT":
            return node[1](*(self(c, path + (("field", f),)) for f, c in zip(node[1]._fields, node[2])))
        if kind == "U":
            return tuple(self(c, path + (("item", i),)) for i, c in enumerate(node[1]))
        if kind == "L":
            return [self(c, path + (("item", i),)) for i, c in enumerate(node[1])]
        if kind == "D":
            return node[1]((k, self(c, path + (("item", k),))) for k, c in node[2])
        if kind == "P":
            children = [self(c, path + (("child", i),)) for i, c in enumerate(node[3])]
            obj = _objects.pytree_unflatten(node[1], children, node[2].value)
            if self.created is not None:
                self.created[id(obj)] = (path, obj)
            return obj
        if kind == "O":
            obj = _objects.rebuild(node[1], {name: self(c, path + (("attr", name),)) for name, c in node[3]})
            if self.created is not None:
                self.created[id(obj)] = (path, obj)
            if node[2] is not None and self.call is not None:
                target = _follow(self.call, node[2])
                _objects.assign(target, obj)
                return target
            return obj
        raise AssertionError(f"bad schema node {node!r}")


def _follow(call, path):
    """The caller's object at `path` (steps as _Unflattener records them) in (args, kwargs)."""
    args, kwargs = call
    (where, key), steps = path[0], path[1:]
    obj = args[key] if where == "arg" else kwargs[key]
    for step, key in steps:
        if step in ("attr", "field"):
            obj = getattr(obj, key)
        elif step == "child":
            obj = _objects.pytree_flatten(obj)[0][key]
        else:
            obj = obj[key]
    return obj


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


def unflatten_inputs(schema, tensors, python_scalars=False, created_objects=None):
    """The call's (args, kwargs) again. python_scalars: the Python numbers themselves, as the user
    passed them, instead of the 0-d tensors that stand for them in the graph. created_objects: a
    dict that receives id -> (path, object) of every object rebuilt, for flatten_outputs and
    refuse_unreturned_changes."""
    arg_nodes, kwarg_nodes = schema
    rebuild = _Unflattener(tensors, python_scalars, created_objects)
    args = [rebuild(n, (("arg", i),)) for i, n in enumerate(arg_nodes)]
    kwargs = {k: rebuild(n, (("kwarg", k),)) for k, n in kwarg_nodes}
    return args, kwargs


def refuse_unreturned_changes(created_objects, before, output_schema):
    """Raises where the module changed an input object (a cache it updated) that the output does
    not return as itself: eager's caller sees the change, and the graph cannot make it. A pytree
    type is rebuilt by its own unflatten function, never updated in place, so any change to one
    is refused. before: _objects.snapshot of each object, taken before the call."""
    returned = [node[2] for node in _walk([output_schema]) if node[0] == "O" and node[2] is not None]
    for key, (path, obj) in created_objects.items():
        if _objects.snapshot(obj) == before[key]:
            continue
        if _objects.kind(obj) == "state" and any(path[:len(r)] == r for r in returned):
            continue
        where = "".join(f".{k}" if step in ("attr", "field") else f"<{k}>" if step == "child" else f"[{k!r}]"
                        for step, k in path[1:])
        root = f"argument {path[0][1]}" if path[0][0] == "arg" else f"keyword argument {path[0][1]!r}"
        raise UnsupportedTypeError(
            f"onnxtrain cannot pass {root}{where}: the module changes this {type(obj).__qualname__} in place"
            + (" and does not return it" if _objects.kind(obj) == "state" else
               ", and a type registered with torch.utils._pytree is rebuilt, not updated")
            + ", so the graph cannot leave the caller's object as eager does")


def number_attributes(schema):
    """(class, attribute) of every Python number held by an object in the inputs."""
    found = set()
    for node in _walk(_input_roots(schema)):
        if node[0] == "O":
            found.update((node[1], name) for name, child in node[3] if child[0] == "S")
    return frozenset(found)


def _input_roots(schema):
    return list(schema[0]) + [n for _, n in schema[1]]


def _walk(roots):
    """Every node below the given schema nodes, depth first."""
    pending = list(roots)
    while pending:
        node = pending.pop()
        yield node
        kind = node[0]
        if kind in ("U", "L"):
            pending.extend(node[1])
        elif kind == "NT":
            pending.extend(node[2])
        elif kind == "D":
            pending.extend(c for _, c in node[2])
        elif kind == "O":
            pending.extend(c for _, c in node[3])
        elif kind == "P":
            pending.extend(node[3])


def scalar_positions(schema):
    """Indices of the flat tensors that stand for Python numbers."""
    return sorted(node[2] for node in _walk(_input_roots(schema)) if node[0] == "S")


def flatten_outputs(out, input_objects=None, number_attributes=frozenset(), traced_number=None):
    """(tensors, schema) of a module's output. The other arguments: see _Flattener."""
    flat = _Flattener(False, input_objects, number_attributes, traced_number)
    schema = flat(out, "output")
    return flat.tensors, schema


def unflatten_outputs(schema, tensors, call=None):
    """The module's output again; numbers an object holds come back as Python numbers. call: the
    caller's (args, kwargs), whose objects an output that is one of them updates in place."""
    return _Unflattener(tensors, python_scalars=True, call=call)(schema)


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
        elif kind == "O":
            for name, c in node[3]:
                walk(c, f"{path}.{name}")
        elif kind == "P":
            for i, c in enumerate(node[3]):
                walk(c, f"{path}<{i}>")

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
