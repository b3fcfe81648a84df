"""Flattening of a module's inputs and outputs into tensor lists, and back.

A schema is a hashable tree that records everything but the tensors: containers and their
types, dict keys, None, and Python constants. Two calls with the same schema (and the same
tensor dtypes, ranks and requires_grad) can run the same exported graph.
"""
import torch


class UnsupportedTypeError(TypeError):
    pass


def _flatten(obj, tensors, path):
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return ("T", len(tensors) - 1)
    if obj is None:
        return ("N",)
    if isinstance(obj, (bool, int, float, str)):
        return ("C", type(obj), obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return ("NT", type(obj), tuple(_flatten(v, tensors, f"{path}.{f}") for f, v in zip(obj._fields, obj)))
    if isinstance(obj, (tuple, list)):
        kind = "U" if isinstance(obj, tuple) else "L"
        return (kind, tuple(_flatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)))
    if isinstance(obj, dict):
        return ("D", type(obj), tuple((k, _flatten(v, tensors, f"{path}[{k!r}]")) for k, v in obj.items()))
    raise UnsupportedTypeError(
        f"onnxtrain cannot pass {path} of type {type(obj).__qualname__}: supported are tensors, None, "
        "bool, int, float, str and lists, tuples, dicts and namedtuples of them")


def _unflatten(node, tensors):
    kind = node[0]
    if kind == "T":
        return tensors[node[1]]
    if kind == "N":
        return None
    if kind == "C":
        return node[2]
    if kind == "NT":
        return node[1](*(_unflatten(c, tensors) for c in node[2]))
    if kind == "U":
        return tuple(_unflatten(c, tensors) for c in node[1])
    if kind == "L":
        return [_unflatten(c, tensors) for c in node[1]]
    if kind == "D":
        return node[1]((k, _unflatten(c, tensors)) for k, c in node[2])
    raise AssertionError(f"bad schema node {node!r}")


def flatten_inputs(args, kwargs):
    """Returns (tensors, schema) for a call module(*args, **kwargs)."""
    tensors = []
    arg_nodes = tuple(_flatten(a, tensors, f"argument {i}") for i, a in enumerate(args))
    kwarg_nodes = tuple((k, _flatten(kwargs[k], tensors, f"keyword argument {k!r}")) for k in sorted(kwargs))
    return tensors, (arg_nodes, kwarg_nodes)


def unflatten_inputs(schema, tensors):
    arg_nodes, kwarg_nodes = schema
    args = [_unflatten(n, tensors) for n in arg_nodes]
    kwargs = {k: _unflatten(n, tensors) for k, n in kwarg_nodes}
    return args, kwargs


def flatten_outputs(out):
    tensors = []
    return tensors, _flatten(out, tensors, "output")


def unflatten_outputs(schema, tensors):
    return _unflatten(schema, tensors)


def tensor_signature(tensors):
    """What of the tensors themselves decides whether an exported graph still fits them."""
    return tuple((t.dtype, t.dim(), t.requires_grad) for t in tensors)
