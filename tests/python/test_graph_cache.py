"""ORTModule's graph cache (onnxtrain/_graph_cache.py): entries with named fields, the least
recently used evicted past the bound, stale entries dropped, and the variant that ran last tried
first; and through ORTModule, DebugOptions.max_cached_graphs bounding a module's exports."""
import torch

import onnxtrain
from onnxtrain._graph_cache import CachedGraphs, CallKey, GraphCache


class _State:
    def __init__(self, unchanged=True):
        self.same = unchanged

    def unchanged(self):
        return self.same


def _entry(name, unchanged=True):
    return CachedGraphs(graphs=name, params=None, state=_State(unchanged))


def _key(signature, variant=0):
    return CallKey(True, ("schema",), signature, variant)


def test_the_least_recently_used_entry_goes_past_the_bound():
    cache = GraphCache(2, "M")
    cache.store(_key("a"), _entry("A"))
    cache.store(_key("b"), _entry("B"))
    assert cache.usable(_key("a")).graphs == "A"  # a is now the most recently used
    cache.store(_key("c"), _entry("C"))
    assert len(cache) == 2
    assert cache.get(_key("b")) is None and cache.get(_key("a")).graphs == "A"
    assert [e.graphs for e in cache.values()] == ["A", "C"]


def test_an_entry_whose_module_changed_is_dropped():
    cache = GraphCache(4, "M")
    cache.store(_key("a"), _entry("A", unchanged=False))
    assert cache.usable(_key("a")) is None
    assert len(cache) == 0


def test_the_variant_that_ran_last_keys_the_next_call():
    cache = GraphCache(4, "M")
    cache.store(_key("a", 0), _entry("A0"))
    cache.store(_key("a", 1), _entry("A1"))
    assert cache.key(True, ("schema",), []).variant == 0
    cache.ran(_key("a", 1))
    assert cache.next_variant(_key("a").call) == 2
    assert [k.variant for k, _ in cache.variants(_key("a").call)] == [0, 1]


def test_evicting_a_structures_last_export_forgets_its_variant():
    cache = GraphCache(1, "M")
    cache.store(_key("a", 1), _entry("A1"))
    cache.ran(_key("a", 1))
    cache.store(_key("b"), _entry("B"))
    assert cache.get(_key("a", 1)) is None
    assert cache._last_variant == {}


def test_max_cached_graphs_bounds_a_modules_exports():
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(torch.nn.Linear(3, 2), onnxtrain.DebugOptions(max_cached_graphs=2))
    for rank in (2, 3, 4):  # each input rank is another call structure, exported anew
        model(torch.randn(*([2] * (rank - 1)), 3)).sum().backward()
    assert len(model._graphs) == 2
    assert model.engine_runs == 3
