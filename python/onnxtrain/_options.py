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

    def __post_init__(self):
        self.log_level = LogLevel(self.log_level)
        for name in ("plan_cache_mb", "buffer_cache_mb"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"DebugOptions({name}=...) takes a number of MiB >= 0, got {value!r}")
        if not isinstance(self.max_cached_graphs, int) or self.max_cached_graphs < 1:
            raise ValueError(f"DebugOptions(max_cached_graphs=...) takes an int >= 1, got {self.max_cached_graphs!r}")
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("DebugOptions(save_onnx=True) needs an onnx_prefix to name the files")


def fallback_enabled() -> bool:
    """ONNXTRAIN_FALLBACK=0 makes every export or unsupported-op failure raise."""
    return os.environ.get("ONNXTRAIN_FALLBACK", "1").strip().lower() not in ("0", "false", "no", "off")
