"""Engine logs go through Python's logging, logger "onnxtrain"."""
import atexit
import logging

from . import _C
from ._options import LogLevel

logger = logging.getLogger("onnxtrain")

_TO_PYTHON = {
    LogLevel.VERBOSE: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.FATAL: logging.CRITICAL,
}


def _sink(level: int, message: str) -> None:
    logger.log(_TO_PYTHON[LogLevel(level)], message)


_C.set_log_sink(_sink)
# The sink holds a Python callable: release it while the interpreter is still alive, not in the
# extension's static destructors after it is gone.
atexit.register(_C.set_log_sink, None)


def apply_log_level(level: LogLevel) -> None:
    """Sets both the C++ engine's threshold and the "onnxtrain" logger's."""
    _C.set_log_level(int(level))
    logger.setLevel(_TO_PYTHON[level])
