"""Debug options, saved graphs, unsupported ops and the fallback policy."""
import glob
import os
import warnings

import onnx
import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_engine_ran


def test_save_onnx_writes_graphs_that_load(tmp_path):
    options = onnxtrain.DebugOptions(save_onnx=True, onnx_prefix="mlp", save_path=str(tmp_path))
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 2)), debug_options=options)
    model(torch.randn(3, 6)).sum().backward()
    names = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "*.onnx")))
    assert names == ["mlp_train_backward.onnx", "mlp_train_exported.onnx", "mlp_train_forward.onnx",
                     "mlp_train_training.onnx"]
    for name in names:
        m = onnx.load(str(tmp_path / name))
        onnx.checker.check_model(m)
        assert len(m.graph.node) > 0, name
    backward = onnx.load(str(tmp_path / "mlp_train_backward.onnx"))
    assert any(n.op_type == "TanhGrad" for n in backward.graph.node)


@pytest.mark.parametrize("level", [0, 1])
def test_save_onnx_writes_the_optimized_training_graph(tmp_path, level):
    options = onnxtrain.DebugOptions(save_onnx=True, onnx_prefix="net", save_path=str(tmp_path),
                                     optimization_level=level)
    net = nn.Sequential(nn.Linear(6, 4), nn.Sigmoid(), nn.Tanh())
    model = onnxtrain.ORTModule(net, debug_options=options)
    model(torch.randn(2, 3, 6)).sum().backward()
    training = onnx.load(str(tmp_path / "net_train_training.onnx"))
    ops = [n.op_type for n in training.graph.node]
    biased_products = [n for n in training.graph.node if n.op_type == "FusedMatMul" and len(n.input) == 3]
    if level == 0:
        assert "FusedElementwise" not in ops and not biased_products, ops
    else:  # Sigmoid-Tanh and their gradients each one loop; the bias inside the product
        assert ops.count("FusedElementwise") >= 2 and len(biased_products) == 1, ops
        assert "Sigmoid" not in ops and "TanhGrad" not in ops, ops


def test_log_level_info_reports_export_and_stash(caplog):
    options = onnxtrain.DebugOptions(log_level=onnxtrain.LogLevel.INFO)
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(6, 4), nn.ReLU()), debug_options=options)
    with caplog.at_level("INFO", logger="onnxtrain"):
        model(torch.randn(3, 6)).sum().backward()
    text = caplog.text
    assert "exported Sequential in train mode" in text
    assert "bytes saved for backward" in text
    onnxtrain.ORTModule(nn.Identity(), debug_options=onnxtrain.DebugOptions())  # back to WARNING


class UsesLpNormalization(nn.Module):
    """torch.erfinv exported (by the fixture below) as ONNX LpNormalization, an op without a kernel
    in onnxtrain: nearly every op torch emits has one, so the test makes its own gap."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 9)

    def forward(self, x):
        return torch.erfinv(torch.tanh(self.fc(x)) * 0.9)


@pytest.fixture(autouse=True)
def erfinv_as_lp_normalization():
    torch.onnx.register_custom_op_symbolic("aten::erfinv", lambda g, x: g.op("LpNormalization", x), 17)
    yield
    torch.onnx.unregister_custom_op_symbolic("aten::erfinv", 17)


def test_unsupported_op_raises_naming_op_and_node_when_fallback_is_off():
    model = onnxtrain.ORTModule(UsesLpNormalization())
    with pytest.raises(RuntimeError) as info:
        model(torch.randn(2, 3))
    message = str(info.value)
    assert "LpNormalization (opset 17)" in message
    assert "node '/module/LpNormalization" in message
    assert "ONNXTRAIN_FALLBACK=0" in message


def test_unsupported_op_warns_and_falls_back_by_default(monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")
    net = UsesLpNormalization()
    model = onnxtrain.ORTModule(net)
    x = torch.randn(2, 3)
    with pytest.warns(RuntimeWarning, match=r"falling back to PyTorch for UsesLpNormalization: .*LpNormalization"):
        out = model(x)
    torch.testing.assert_close(out, net(x))
    assert model.fallback_reason is not None and "LpNormalization" in model.fallback_reason
    # Later calls stay in PyTorch without warning again.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x).sum().backward()
    assert net.fc.weight.grad is not None


class ReturnsAnObject(nn.Module):
    class Result:
        def __init__(self, value):
            self.value = value

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.Result(self.fc(x))


def test_export_failure_raises_clearly_without_fallback():
    model = onnxtrain.ORTModule(ReturnsAnObject())
    with pytest.raises(RuntimeError, match="Result"):
        model(torch.randn(1, 2))


def test_a_working_model_after_a_failed_export_still_trains(monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "1")
    with pytest.warns(RuntimeWarning):
        onnxtrain.ORTModule(ReturnsAnObject())(torch.randn(1, 2))
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "0")
    model = onnxtrain.ORTModule(nn.Linear(3, 2))
    out = model(torch.randn(2, 3))
    assert_engine_ran(out)


def test_wrong_input_shape_names_the_input():
    model = onnxtrain.ORTModule(nn.Linear(4, 2))
    model(torch.randn(3, 4))
    # The engine names its node; torch.export, which traces the new shape, fails like eager.
    with pytest.raises(RuntimeError, match=r"Gemm node .* failed|mat1 and mat2 shapes cannot be multiplied"):
        model(torch.randn(3, 5))
