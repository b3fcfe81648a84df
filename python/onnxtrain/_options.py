"""User-facing options: log levels, debug options and the environment variables."""
import enum
import os
from dataclasses import dataclass


class LogLevel(enum.IntEnum):
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


@dataclass
class DebugOptions:
    """What ORTModule logs and keeps for inspection.

    save_onnx writes the exported, training, forward and backward graphs as
    ``<save_path>/<onnx_prefix>_<mode>_<graph>.onnx`` when a graph is built.

    Every field is checked when it is set: a wrong type raises TypeError, a wrong value
    (a save_path that is not an existing directory, a negative size) ValueError, naming the field.
    """

    log_level: LogLevel = LogLevel.WARNING
    save_onnx: bool = False
    onnx_prefix: str = ""
    save_path: str = ""
    check_finite: bool = False  # raise at the first op that produces NaN or Inf, naming it
    profile_path: str = ""  # write a per-kernel Chrome trace here (like ONNXTRAIN_PROFILE)
    # Graph optimizer level: 0 runs no pass, 1 (the default) all of them; None reads
    # ONNXTRAIN_OPT_LEVEL.
    optimization_level: int = None
    # Memory budgets, process-wide (they set ONNXTRAIN_PLAN_CACHE_MB and ONNXTRAIN_BUFFER_CACHE_MB
    # for the whole process; None leaves them as they are). plan_cache_mb bounds the idle arenas of
    # the memory plans, buffer_cache_mb the freed output and gradient buffers kept for reuse; past
    # either, the least recently used memory goes back to the system.
    plan_cache_mb: int = None
    buffer_cache_mb: int = None
    # Exported graphs an ORTModule keeps, one per input structure, dtypes and mode (and per value
    # of Python numbers that the trace turned into constants); the least recently used goes first.
    max_cached_graphs: int = 16
    # What backward recomputes instead of keeping from the forward: "none", or "recompute" for
    # cheap activations (elementwise ops, activation functions, normalization outputs whose
    # inputs backward keeps anyway; never MatMul, Conv or Gemm), which trades a little time for
    # the stash memory. None reads ONNXTRAIN_MEMORY_OPTIMIZATION (default "none").
    # torch.utils.checkpoint segments are recomputed either way.
    memory_optimization: str = None
    # The eager warm-up (see _eager_warmup): a call the engine has no graphs for runs in eager
    # PyTorch while its capture goes on beside it, and the module switches to the engine once the
    # graphs are ready. False captures blocking, in the call that needs it. None reads
    # ONNXTRAIN_EAGER_WARMUP (default on).
    eager_warmup: bool = None

    def __setattr__(self, name, value):
        check = _FIELD_CHECKS.get(name)
        super().__setattr__(name, value if check is None else check(name, value))

    def __post_init__(self):
        if self.save_onnx:
            if not self.onnx_prefix:
                raise ValueError("DebugOptions(save_onnx=True) needs an onnx_prefix to name the files")
            directory = self.save_path or os.getcwd()
            if not os.access(directory, os.W_OK):
                raise ValueError(f"DebugOptions(save_onnx=True) writes to save_path, but the directory {directory!r} "
                                 "is not writable")


def _describe(value):
    return f"{type(value).__name__} {value!r}"


def _bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"DebugOptions({name}=...) takes True or False, got {_describe(value)}")
    return value


def _optional_bool(name, value):
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"DebugOptions({name}=...) takes True, False or None, got {_describe(value)}")
    return value


def _log_level(name, value):
    if not isinstance(value, LogLevel):
        raise TypeError(f"DebugOptions({name}=...) takes a LogLevel (for example LogLevel.INFO), got "
                        f"{_describe(value)}")
    return value


def _prefix(name, value):
    if not isinstance(value, str):
        raise TypeError(f"DebugOptions({name}=...) takes a str, got {_describe(value)}")
    if os.sep in value or (os.altsep and os.altsep in value):
        raise ValueError(f"DebugOptions({name}=...) names the files, so it cannot hold a path separator "
                         f"(got {value!r}); put the directory in save_path")
    return value


def _path(name, value):
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"DebugOptions({name}=...) takes a path (a str or os.PathLike), got {_describe(value)}")
    return os.fspath(value)


def _directory(name, value):
    value = _path(name, value)
    if value and not os.path.isdir(value):
        raise ValueError(f"DebugOptions({name}=...) takes an existing directory, got {value!r}")
    return value


def _file(name, value):
    value = _path(name, value)
    if value and (os.path.isdir(value) or not os.path.isdir(os.path.dirname(os.path.abspath(value)))):
        raise ValueError(f"DebugOptions({name}=...) takes the path of a file in an existing directory, got {value!r}")
    return value


def _count(minimum, optional):
    def check(name, value):
        if value is None and optional:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"DebugOptions({name}=...) takes an int{' or None' if optional else ''}, got "
                            f"{_describe(value)}")
        if value < minimum:
            raise ValueError(f"DebugOptions({name}=...) takes an int >= {minimum}, got {value}")
        return value

    return check


MEMORY_OPTIMIZATIONS = ("none", "recompute")


def _memory_optimization(name, value):
    if value is None:
        return value
    if not isinstance(value, str):
        raise TypeError(f"DebugOptions({name}=...) takes one of {', '.join(map(repr, MEMORY_OPTIMIZATIONS))} or None, "
                        f"got {_describe(value)}")
    if value not in MEMORY_OPTIMIZATIONS:
        raise ValueError(f"DebugOptions({name}=...) takes one of {', '.join(map(repr, MEMORY_OPTIMIZATIONS))}, "
                         f"got {value!r}")
    return value


def memory_optimization(options):
    """The memory optimization in effect: the option, else ONNXTRAIN_MEMORY_OPTIMIZATION, else "none"."""
    if options.memory_optimization is not None:
        return options.memory_optimization
    value = os.environ.get("ONNXTRAIN_MEMORY_OPTIMIZATION", "").strip().lower() or "none"
    if value not in MEMORY_OPTIMIZATIONS:
        raise ValueError(f"ONNXTRAIN_MEMORY_OPTIMIZATION takes one of {', '.join(map(repr, MEMORY_OPTIMIZATIONS))}, "
                         f"got {value!r}")
    return value


_FIELD_CHECKS = {
    "log_level": _log_level,
    "save_onnx": _bool,
    "onnx_prefix": _prefix,
    "save_path": _directory,
    "check_finite": _bool,
    "profile_path": _file,
    "optimization_level": _count(0, optional=True),
    "plan_cache_mb": _count(0, optional=True),
    "buffer_cache_mb": _count(0, optional=True),
    "max_cached_graphs": _count(1, optional=False),
    "memory_optimization": _memory_optimization,
    "eager_warmup": _optional_bool,
}


def fallback_enabled() -> bool:
    """ONNXTRAIN_FALLBACK=0 makes every export or unsupported-op failure raise."""
    return os.environ.get("ONNXTRAIN_FALLBACK", "1").strip().lower() not in ("0", "false", "no", "off")
