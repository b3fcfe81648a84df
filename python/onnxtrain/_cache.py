"""ONNXTRAIN_CACHE_DIR: exports kept on disk, so that a new process skips torch.onnx.export for
a module it has seen. The key covers everything an export depends on: the versions of torch,
onnx and onnxtrain, the mode, the input schema and tensor signature, and the module itself (its
structure, parameter and buffer shapes and dtypes, the source code of its classes and their
simple attributes).

A cache directory may be shared or synced, so an entry is data, never code: the ONNX bytes and a
JSON description of how the graph maps to the module, under a SHA-256 over the key, the JSON and
the bytes. Loading runs nothing: classes named in an output schema (a namedtuple, say) are looked
up among modules already imported, never imported. An entry that does not verify is discarded
and written again after the export. A directory that cannot be used costs a warning, once, and
training goes on without the cache."""
import hashlib
import importlib.metadata
import inspect
import json
import os
import sys
import weakref

import torch

from ._logging import logger

FORMAT = 7  # 7: the capture backend keys an entry; torch.export's dim ranges
_MAGIC = b"onnxtrain-export-cache"
_warned_unusable = set()


def directory():
    return os.environ.get("ONNXTRAIN_CACHE_DIR") or None


# A class's source, looked up once per class: inspect parses the class's whole file on every
# lookup, which made the key of resnet50 (218 submodules of a dozen classes) take 2.6 s. The
# class object's code cannot change after it was defined, so neither can what the key needs of it;
# the entries go with their classes.
_CLASS_SOURCES = weakref.WeakKeyDictionary()


def _class_source(cls):
    source = _CLASS_SOURCES.get(cls)
    if source is None:
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            source = cls.__module__ + "." + cls.__qualname__
        try:
            _CLASS_SOURCES[cls] = source
        except TypeError:  # a class that takes no weak reference is looked up every time
            pass
    return source


def _simple_attributes(module):
    out = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, (bool, int, float, str, type(None))) or (
                isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value)):
            out.append((name, value))
    return out


def key(module, training, schema, signature):
    h = hashlib.sha256()
    from .capture import backend_name

    parts = [FORMAT, torch.__version__, importlib.metadata.version("onnx"), backend_name(), training, repr(schema),
             repr(signature)]
    for name, sub in module.named_modules():
        parts += [name, _class_source(type(sub)), _simple_attributes(sub)]
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        parts += [name, tuple(t.shape), str(t.dtype)]
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


# ---- plain-data encoding of the export's description ----

class _Undecodable(ValueError):
    pass


def _encode(value):
    """Schemas are trees of tuples, lists, numbers, strings, None and classes; JSON tags the
    kinds it cannot tell apart."""
    if value is None or type(value) in (bool, int, float, str):  # not subclasses: JSON would lose them
        return value
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return {"list": [_encode(v) for v in value]}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).split(".")[-1]}
    if isinstance(value, type):
        try:
            if _resolve_class(value.__module__, value.__qualname__) is value:
                return {"class": [value.__module__, value.__qualname__]}
        except _Undecodable:
            pass
        raise _Undecodable(f"class {value.__qualname__} cannot be found by its name")
    raise _Undecodable(f"cannot store a {type(value).__qualname__} in the export cache")


def _resolve_class(module_name, qualname):
    """The class, from a module this process has already imported; importing would run code."""
    module = sys.modules.get(module_name)
    if module is None:
        raise _Undecodable(f"class {module_name}.{qualname} is not loaded in this process")
    obj = module
    for part in qualname.split("."):
        if part == "<locals>":
            raise _Undecodable(f"class {module_name}.{qualname} is local to a function")
        obj = getattr(obj, part, None)
    if not isinstance(obj, type):
        raise _Undecodable(f"{module_name}.{qualname} is not a class")
    return obj


def _decode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (tag, body), = value.items()
        if tag == "tuple" and isinstance(body, list):
            return tuple(_decode(v) for v in body)
        if tag == "list" and isinstance(body, list):
            return [_decode(v) for v in body]
        if tag == "device" and isinstance(body, str):
            return torch.device(body)
        if tag == "dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
            return getattr(torch, body)
        if tag == "class" and isinstance(body, list) and len(body) == 2 and all(isinstance(b, str) for b in body):
            return _resolve_class(*body)
    raise _Undecodable(f"unexpected value {value!r:.80} in a cache entry")


def _describe(exported):
    return {
        "graph_inputs": _encode([tuple(i) for i in exported.graph_inputs]),
        "output_schema": _encode(exported.output_schema),
        "num_user_outputs": exported.num_user_outputs,
        "buffer_outputs": _encode([tuple(o) for o in exported.buffer_updates.outputs]),
        "batchnorm_paths": _encode(list(exported.buffer_updates.batchnorm_paths)),
        "trace_warnings": _encode([tuple(w) for w in exported.trace_warnings]),
        "bakes_scalars": bool(exported.bakes_scalars),
        "input_names": _encode(list(exported.input_names)),
        "output_names": _encode(list(exported.output_names)),
        "has_randomness": bool(exported.has_randomness),
        "shrunk": bool(exported.shrunk),
        "dim_ranges": _encode(exported.dim_ranges),
        "shape_guards": _encode(tuple(exported.shape_guards)),
    }


def _rebuild(description, model_bytes):
    from .capture import BufferUpdates, Exported

    d = description
    updates = BufferUpdates()
    updates.outputs = [tuple(o) for o in _decode(d["buffer_outputs"])]
    updates.batchnorm_paths = list(_decode(d["batchnorm_paths"]))
    exported = Exported(model_bytes, [tuple(i) for i in _decode(d["graph_inputs"])], _decode(d["output_schema"]),
                        int(d["num_user_outputs"]), updates, [tuple(w) for w in _decode(d["trace_warnings"])],
                        bool(d["bakes_scalars"]), _decode(d["input_names"]), _decode(d["output_names"]),
                        bool(d["has_randomness"]))
    exported.shrunk = bool(d["shrunk"])
    exported.dim_ranges = _decode(d["dim_ranges"])
    exported.shape_guards = _decode(d["shape_guards"])
    return exported


def _digest(cache_key, meta, model_bytes):
    h = hashlib.sha256()
    for part in (_MAGIC, cache_key.encode(), meta, model_bytes):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest().encode()


def encode_entry(cache_key, exported):
    """The bytes of a cache entry: a header line, the JSON description, the ONNX model."""
    meta = json.dumps(_describe(exported), sort_keys=True).encode()
    header = b"%s %d %s %d\n" % (_MAGIC, FORMAT, _digest(cache_key, meta, exported.model_bytes), len(meta))
    return header + meta + exported.model_bytes


def decode_entry(cache_key, data):
    """The Exported an entry holds; raises ValueError for anything that does not verify."""
    newline = data.find(b"\n", 0, 200)
    fields = data[:newline].split(b" ") if newline > 0 else []
    if len(fields) != 4 or fields[0] != _MAGIC or fields[1] != b"%d" % FORMAT or not fields[3].isdigit():
        raise ValueError("not an onnxtrain export-cache entry of this version")
    meta_len = int(fields[3])
    meta = data[newline + 1:newline + 1 + meta_len]
    model_bytes = data[newline + 1 + meta_len:]
    if len(meta) != meta_len or _digest(cache_key, meta, model_bytes) != fields[2]:
        raise ValueError("its content hash does not match (the entry is damaged or was edited)")
    try:
        return _rebuild(json.loads(meta), model_bytes)
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"malformed description: {e}") from None


def _entry_path(cache_key):
    return os.path.join(directory(), cache_key + ".onnxexport")


def _warn_unusable(path, error):
    root = directory()
    if root in _warned_unusable:
        return
    _warned_unusable.add(root)
    logger.warning("onnxtrain: the export cache ONNXTRAIN_CACHE_DIR=%s cannot be used (%s: %s); training goes on "
                   "without it", root, type(error).__name__, error)


def load(cache_key):
    """The cached export, or None (absent, unusable, or discarded because it did not verify)."""
    path = _entry_path(cache_key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_unusable(path, e)
        return None
    try:
        return decode_entry(cache_key, data)
    except _Undecodable as e:  # a sound entry this process cannot use: leave it for others
        logger.info("onnxtrain: not using cache entry %s: %s", path, e)
        return None
    except ValueError as e:
        logger.warning("onnxtrain: discarding cache entry %s: %s; exporting again", path, e)
        try:
            os.remove(path)
        except OSError:
            pass
        return None


def store(cache_key, exported):
    if exported.python_functions:
        # A PythonOp names a Python class and its arguments: code, which an entry never holds.
        logger.info("onnxtrain: this export runs custom autograd.Functions, so it is not cached")
        return
    try:
        data = encode_entry(cache_key, exported)
    except _Undecodable as e:  # e.g. a class the description cannot name
        logger.info("onnxtrain: this export cannot be cached: %s", e)
        return
    path = _entry_path(cache_key)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory(), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: concurrent processes never read half a file
    except OSError as e:
        _warn_unusable(path, e)
        try:
            os.remove(tmp)
        except OSError:
            pass
