"""torch.autocast around an ORTModule call: the trace bakes autocast's casts into the export, so a
graph exported outside autocast must not serve a call inside it, nor the reverse (it once did, and
returned float32 where eager returned bfloat16)."""
import copy

import pytest
import torch
import torch.nn as nn

import onnxtrain


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def call(model, x, autocast):
    if autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    return model(x)


@pytest.mark.parametrize("order", [(False, True, False), (True, False, True)], ids=["off-on-off", "on-off-on"])
def test_each_autocast_setting_gets_the_graph_eager_runs(order):
    eager = make()
    model = onnxtrain.ORTModule(copy.deepcopy(eager))
    x = torch.randn(4, 8)
    for autocast in order:
        expected, actual = call(eager, x, autocast), call(model, x, autocast)
        assert actual.dtype == expected.dtype, f"autocast={autocast}"
        tolerance = dict(rtol=2e-2, atol=2e-2) if autocast else dict(rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(actual.float(), expected.float(), **tolerance)
        assert "ORTModuleFunction" in type(actual.grad_fn).__name__
        actual.float().sum().backward()
        expected.float().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tolerance)
            p.grad = q.grad = None
    assert model.fallback_reason is None
