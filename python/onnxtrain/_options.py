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

    def __post_init__(self):
        self.log_level = LogLevel(self.log_level)
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("DebugOptions(save_onnx=True) needs an onnx_prefix to name the files")


def fallback_enabled() -> bool:
    """ONNXTRAIN_FALLBACK=0 makes every export or unsupported-op failure raise."""
    return os.environ.get("ONNXTRAIN_FALLBACK", "1").strip().lower() not in ("0", "false", "no", "off")
