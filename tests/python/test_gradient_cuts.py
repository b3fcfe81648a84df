"""Where the user's forward cuts a value off from autograd, the engine must not differentiate
through it: x.detach() becomes the engine's StopGradient on both captures; a torch.no_grad() block
is detached on the torch.export capture and refused by name on the TorchScript one, which records
no place where the gradient stops; reading .data, which the TorchScript trace would bake in as a
constant of the example values, is refused. Against eager over two batch sizes, fallback off."""
import copy

import onnx
import pytest
import torch

import onnxtrain
from onnxtrain.capture import torch_export
from conftest import assert_close, assert_engine_ran

CAPTURES = ["torchscript"] + (["torch_export"] if torch_export.unavailable_reason() is None else [])


class Head(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.fc = torch.nn.Linear(5, 5)

    def forward(self, x):
        return self.fn(self.fc(x))


def detached_scale(y):
    return y * (y.detach() + 3)


def remainder_by_detached(y):
    return torch.remainder(y, y.detach().abs() + 3)


def no_grad_block(y):
    with torch.no_grad():
        z = y * 2 + 1
    return y * z


def set_grad_enabled_block(y):
    with torch.set_grad_enabled(False):
        z = y.exp()
    return y + z


def reads_data(y):
    return y * (y.data + 1)


def trains_like_eager(fn):
    torch.manual_seed(0)
    module = Head(fn)
    ref = copy.deepcopy(module)
    model = onnxtrain.ORTModule(module)
    for batch in (6, 7):
        x = torch.randn(batch, 5)
        out, expected = model(x), ref(x)
        assert_engine_ran(out)
        assert_close(out, expected, f"batch {batch} output")
        (out * out).sum().backward()
        (expected * expected).sum().backward()
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"batch {batch} {name}.grad")
            p.grad, q.grad = None, None
    return model


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("fn", [detached_scale, remainder_by_detached], ids=lambda f: f.__name__)
def test_detach_stops_the_gradient(monkeypatch, capture, fn):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE", capture)
    model = trains_like_eager(fn)
    (graphs, _, _), = model._graphs.values()
    ops = [(n.domain, n.op_type) for n in onnx.load_from_string(graphs.exported.model_bytes).graph.node]
    assert ("ai.onnxtrain", "StopGradient") in ops, ops


@pytest.mark.skipif("torch_export" not in CAPTURES, reason=str(torch_export.unavailable_reason()))
@pytest.mark.parametrize("fn", [no_grad_block, set_grad_enabled_block], ids=lambda f: f.__name__)
def test_a_no_grad_block_is_detached_on_the_torch_export_capture(monkeypatch, fn):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE", "torch_export")
    trains_like_eager(fn)


@pytest.mark.parametrize("fn", [no_grad_block, set_grad_enabled_block], ids=lambda f: f.__name__)
def test_a_no_grad_block_is_refused_by_the_torchscript_capture(monkeypatch, fn):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE", "torchscript")
    model = onnxtrain.ORTModule(Head(fn))
    with pytest.raises(RuntimeError, match=r"Head turns gradients off \(torch.no_grad\(\)"):
        model(torch.randn(4, 5))


@pytest.mark.parametrize("capture", CAPTURES)
def test_reading_data_is_refused(monkeypatch, capture):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE", capture)
    model = onnxtrain.ORTModule(Head(reads_data))
    expected = r"reads a tensor's \.data" if capture == "torchscript" else "torch.export.export failed for Head"
    with pytest.raises(RuntimeError, match=expected):
        model(torch.randn(4, 5))
