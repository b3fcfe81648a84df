"""Objects that the input/output flattener (_io) opens: containers of tensors other than lists,
tuples, dicts and namedtuples.

- A type registered with torch.utils._pytree, by the library that defines it (for torch.export),
  is opened by its own flatten function and rebuilt by its unflatten function.
- transformers' key/value caches that grow by concatenation (DynamicCache, its layers, and an
  EncoderDecoderCache of two of them) are opened as their attributes and rebuilt attribute by
  attribute, without running their __init__: transformers registers them with pytree only while
  it exports, and their attributes are all they are (tensors, numbers, flags).
- Other transformers caches are refused by name: StaticCache and its kin write into their tensors
  in place, quantized caches keep a second representation, offloaded ones move tensors between
  devices. A graph can do none of that to tensors the caller holds.
"""
import torch

# Classes of transformers.cache_utils whose update is `self.x = torch.cat([self.x, new])`: a
# rebuilt object with the graph's tensors is the object eager returns.
_GROWING_CACHES = frozenset({"DynamicCache", "EncoderDecoderCache", "DynamicLayer", "DynamicSlidingWindowLayer"})


class UnsupportedObject(TypeError):
    pass


def kind(obj):
    """"pytree", "state" or None (not an object the flattener opens). transformers' caches are
    judged by class before pytree: transformers registers some of those it refuses (StaticCache)
    with pytree for its own exports, and their flatten functions cannot tell a graph that the
    caller's tensors are written in place."""
    cls = type(obj)
    if _is_transformers_cache(cls):
        if cls.__name__ not in _GROWING_CACHES:
            raise UnsupportedObject(
                f"{cls.__qualname__} is not one of the transformers caches onnxtrain passes "
                f"({', '.join(sorted(_GROWING_CACHES))}), which grow by concatenation; caches such as StaticCache "
                "write into their tensors in place, which a graph cannot do to tensors the caller holds")
        if getattr(obj, "offloading", False):
            raise UnsupportedObject(f"an offloading {cls.__qualname__} moves its tensors between devices during the "
                                    "forward, which a graph cannot do")
        if not hasattr(obj, "__dict__"):
            raise UnsupportedObject(f"{cls.__qualname__} keeps its state outside __dict__")
        return "state"
    if _pytree_node(cls) is not None:
        return "pytree"
    return None


def _is_transformers_cache(cls):
    module = cls.__module__ or ""
    return module.startswith("transformers.") and (module.endswith("cache_utils") or cls.__name__.endswith("Cache"))


_BUILTIN_CONTAINERS = (tuple, list, dict)


def _pytree_node(cls):
    try:
        from torch.utils import _pytree
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    if issubclass(cls, _BUILTIN_CONTAINERS):  # _io opens these itself, namedtuples and OrderedDicts included
        return None
    return _pytree.SUPPORTED_NODES.get(cls)


def pytree_flatten(obj):
    """(children, context) by the flatten function registered for its type."""
    return _pytree_node(type(obj)).flatten_fn(obj)


def pytree_unflatten(cls, children, context):
    return _pytree_node(cls).unflatten_fn(list(children), context)


# What torch.nn.Module.__init__ sets (transformers before 4.45 made Cache a Module): the hook and
# submodule tables, not the cache's own state.
_MODULE_ATTRIBUTES = frozenset(vars(torch.nn.Module()))


def state(obj):
    """The attributes that make up the object, in a stable order."""
    if not isinstance(obj, torch.nn.Module):
        return sorted(vars(obj).items())
    used = [name for name in _MODULE_ATTRIBUTES if name != "training" and getattr(obj, name, None)]
    if used:
        raise UnsupportedObject(f"{type(obj).__qualname__} holds module state ({', '.join(sorted(used))}), which "
                                "onnxtrain does not pass")
    return sorted((name, v) for name, v in vars(obj).items() if name not in _MODULE_ATTRIBUTES)


def rebuild(cls, attributes):
    """An object of `cls` holding `attributes`, made without running its __init__ (which for a
    cache may expect a model config); a Module gets Module's own tables first."""
    obj = cls.__new__(cls)
    if isinstance(obj, torch.nn.Module):
        torch.nn.Module.__init__(obj)
    obj.__dict__.update(attributes)
    return obj


def assign(target, source):
    """Makes `target` hold `source`'s state, keeping target's nested objects where they are of
    the same type, as eager's in-place update of a cache the caller passed in keeps them: a
    caller holding cache.layers[0] sees the new keys too."""
    for name, value in vars(source).items():
        current = target.__dict__.get(name)
        if type(current) is type(value) and kind(value) == "state":
            assign(current, value)
        elif isinstance(value, list) and isinstance(current, list) and len(current) == len(value):
            for i, item in enumerate(value):
                if type(current[i]) is type(item) and kind(item) == "state":
                    assign(current[i], item)
                else:
                    current[i] = item
        else:
            target.__dict__[name] = value
    for name in [n for n in target.__dict__ if n not in vars(source) and n not in _MODULE_ATTRIBUTES]:
        del target.__dict__[name]


class Context:
    """A pytree context inside a schema: schemas key dicts, and a context need not be hashable."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        if not isinstance(other, Context):
            return NotImplemented
        try:
            return bool(self.value == other.value)
        except Exception:  # noqa: BLE001 - a context that cannot compare is only equal to itself
            return self.value is other.value

    def __hash__(self):
        try:
            return hash(self.value)
        except TypeError:
            return hash(type(self.value))

    def __repr__(self):
        return f"Context({self.value!r})"


def snapshot(obj):
    """What an in-place change to an opened object replaces: its attributes' values (and the
    items of its lists and tuples), or a pytree type's children, held by reference and compared
    by identity, as a cache's update replaces its tensors and counters."""
    if kind(obj) == "pytree":
        return _Identities(pytree_flatten(obj)[0])
    return _Identities([(name, value, *(value if isinstance(value, (list, tuple)) else ())) for name, value in
                        vars(obj).items()])


class _Identities:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = [tuple(i) if isinstance(i, tuple) else (i,) for i in items]

    def __eq__(self, other):
        return len(self.items) == len(other.items) and all(
            len(a) == len(b) and all(x is y for x, y in zip(a, b)) for a, b in zip(self.items, other.items))
