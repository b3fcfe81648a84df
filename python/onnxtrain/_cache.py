"""ONNXTRAIN_CACHE_DIR: exports kept on disk, so that a new process skips torch.onnx.export for
a module it has seen. The key covers everything an export depends on: the versions of torch,
onnx and onnxtrain, the mode, the input schema and tensor signature, and the module itself (its
structure, parameter and buffer shapes and dtypes, the source code of its classes and their
simple attributes)."""
import hashlib
import inspect
import os
import pickle

import importlib.metadata

import torch

from ._logging import logger

FORMAT = 3


def directory():
    return os.environ.get("ONNXTRAIN_CACHE_DIR") or None


def _class_source(cls):
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return cls.__module__ + "." + cls.__qualname__


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
    parts = [FORMAT, torch.__version__, importlib.metadata.version("onnx"), training, repr(schema), repr(signature)]
    for name, sub in module.named_modules():
        parts += [name, _class_source(type(sub)), _simple_attributes(sub)]
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        parts += [name, tuple(t.shape), str(t.dtype)]
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def load(cache_key):
    path = os.path.join(directory(), cache_key + ".export")
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception as e:  # noqa: BLE001 - a damaged entry is only a cache miss
        logger.warning("onnxtrain: ignoring unreadable cache entry %s: %s", path, e)
        return None


def store(cache_key, exported):
    os.makedirs(directory(), exist_ok=True)
    path = os.path.join(directory(), cache_key + ".export")
    try:
        data = pickle.dumps(exported)
    except Exception as e:  # noqa: BLE001 - e.g. outputs of a locally defined namedtuple class
        logger.info("onnxtrain: this export cannot be cached: %s", e)
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # atomic: concurrent processes never read half a file
