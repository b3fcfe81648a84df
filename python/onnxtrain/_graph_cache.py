"""The engine's graphs of one ORTModule: one entry per call structure and export variant, the least
recently used evicted past a bound (DebugOptions.max_cached_graphs)."""
import collections
import typing

from . import _io
from ._logging import logger


class CallKey(typing.NamedTuple):
    """What a call's graphs are keyed by. Variants are exports of one call structure whose pieces
    differ (a chunk or split whose sizes the trace fixed, a size it baked in): see
    _call_policy.run_fitting_export."""
    training: bool
    schema: tuple
    signature: tuple
    variant: int

    @property
    def call(self):
        """The call structure: the key without its variant."""
        return self[:3]


class ParamLookup:
    """Finds a parameter or buffer by its dotted name on every call, cheaply, so that replaced
    parameters and reassigned buffers are always the ones fed to the engine."""

    def __init__(self, module, names):
        self._slots = []
        for name in names:
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            self._slots.append((owner, attr, name))

    def tensors(self):
        out = []
        for owner, attr, name in self._slots:
            t = owner._parameters.get(attr)
            if t is None:
                t = owner._buffers.get(attr)
            if t is None:
                raise RuntimeError(f"onnxtrain: parameter or buffer {name!r} disappeared from the module")
            out.append(t)
        return out


class CachedGraphs(typing.NamedTuple):
    graphs: object  # _engine.Graphs
    params: ParamLookup
    state: object  # _module_state.ModuleState, taken after the export: what it may have baked in


class GraphCache:
    """Entries by CallKey, least recently used first; which variant of each call structure ran last."""

    def __init__(self, bound, module_name):
        self._entries = collections.OrderedDict()
        self._last_variant = {}
        self._bound = bound
        self._module_name = module_name

    def __len__(self):
        return len(self._entries)

    def values(self):
        return self._entries.values()

    def key(self, training, schema, tensors, variant=None):
        """The key of a call: its variant is the one of its structure that ran last, unless given."""
        call = (training, schema, _io.call_signature(tensors))
        return CallKey(*call, self._last_variant.get(call, 0) if variant is None else variant)

    def get(self, key):
        """The entry under `key`, as it is (its state not checked), or None."""
        return self._entries.get(key)

    def usable(self, key):
        """The entry under `key` when the module is as it was at its export, marked recently used;
        None otherwise (a stale entry is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not entry.state.unchanged():
            logger.info("onnxtrain: an attribute or submodule of %s changed since its export; exporting again",
                        self._module_name)
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def touch(self, key):
        self._entries.move_to_end(key)

    def store(self, key, entry):
        """Keeps `entry` under `key`, evicting the least recently used entries past the bound."""
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._bound:
            evicted, _ = self._entries.popitem(last=False)
            if not any(k.call == evicted.call for k in self._entries):
                self._last_variant.pop(evicted.call, None)
            logger.info("onnxtrain: %s keeps %d graphs (DebugOptions.max_cached_graphs); dropping the least "
                        "recently used", self._module_name, self._bound)
        return entry

    def variants(self, call):
        """(key, entry) of every export of the call structure `call`, least recently used first."""
        return [(k, v) for k, v in self._entries.items() if k.call == call]

    def next_variant(self, call):
        return max((k.variant for k in self._entries if k.call == call), default=-1) + 1

    def ran(self, key):
        """The call ran on the entry under `key`: its variant is tried first from now on."""
        self._entries.move_to_end(key)
        self._last_variant[key.call] = key.variant

    def drop_graphs(self, graphs):
        """Drops every entry of `graphs` (an export that can never fit)."""
        for key in [k for k, v in self._entries.items() if v.graphs is graphs]:
            del self._entries[key]

    def clear(self, variants_too=False):
        """Drops every entry; with variants_too, which variant ran last too (the keys change)."""
        self._entries.clear()
        if variants_too:
            self._last_variant.clear()
