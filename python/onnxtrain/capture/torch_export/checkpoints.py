"""torch.utils.checkpoint under torch.export: the segment is traced inline between boundary
markers, ai.onnxtrain::CheckpointBegin and CheckpointEnd, as the TorchScript capture writes them
(see capture/torchscript/checkpoint.py for what the engine does with them). While torch.export
traces, the markers are the custom ops onnxtrain::checkpoint_begin and checkpoint_end, which pass
their tensors through; their translations write the marker nodes (through stubs.py)."""
import itertools
from typing import List

import torch

from ..torchscript.checkpoint import _EAGER_OPTIONS
from . import stubs

_segment_ids = itertools.count()
_MARKERS = {"begin": "CheckpointBegin", "end": "CheckpointEnd"}


@torch.library.custom_op("onnxtrain::checkpoint_begin", mutates_args=())
def checkpoint_begin(tensors: List[torch.Tensor], segment: int) -> List[torch.Tensor]:
    return [t.clone() for t in tensors]


@checkpoint_begin.register_fake
def _begin_fake(tensors, segment):
    return [t.clone() for t in tensors]


@torch.library.custom_op("onnxtrain::checkpoint_end", mutates_args=())
def checkpoint_end(tensors: List[torch.Tensor], segment: int) -> List[torch.Tensor]:
    return [t.clone() for t in tensors]


@checkpoint_end.register_fake
def _end_fake(tensors, segment):
    return [t.clone() for t in tensors]


def _through(marker, segment, values):
    positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if not positions:
        return list(values)
    passed = marker([values[i] for i in positions], segment)
    out = list(values)
    for i, t in zip(positions, passed):
        out[i] = t
    return out


def traced_segment(untouched, function, *args, use_reentrant=None, **kwargs):
    """torch.utils.checkpoint.checkpoint while torch.export traces (see replaced_checkpoint)."""
    kwargs.pop("preserve_rng_state", None)  # the engine recomputes Dropout from its forward's mask
    for option in _EAGER_OPTIONS:
        kwargs.pop(option, None)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    segment = next(_segment_ids)
    outputs = function(*_through(checkpoint_begin, segment, list(args)), **kwargs)
    if isinstance(outputs, torch.Tensor):
        return _through(checkpoint_end, segment, [outputs])[0]
    if isinstance(outputs, (tuple, list)) and type(outputs) in (tuple, list):
        return type(outputs)(_through(checkpoint_end, segment, list(outputs)))
    return outputs  # another structure: traced unmarked, its values stashed as without checkpoint


def _translation(kind):
    def translate(tensors, segment):
        return stubs.write(tensors, f"checkpoint-{kind}-{segment}-{len(tensors)}", len(tensors))

    return translate


def describe(group):
    """The marker node of a checkpoint group, for stubs.merge; None for another group."""
    if not group.startswith("checkpoint-"):
        return None
    _, kind, segment, count = group.split("-")
    return _MARKERS[kind], {"segment": int(segment)}, int(count), 0


def translations():
    return {checkpoint_begin._opoverload: _translation("begin"), checkpoint_end._opoverload: _translation("end")}
