"""Layers, activations and losses through onnxtrain against PyTorch: outputs, input and parameter
gradients, and optimizer state over a few steps."""
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from parity import train_and_compare


def fixed(*tensors_per_step, target=None):
    return lambda step: (tensors_per_step[step % len(tensors_per_step)], target)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Sum(nn.Module):
    """Wraps a layer so that the module returns a scalar loss."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *x):
        out = self.layer(*x)
        return (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum()


@pytest.mark.parametrize("activation", [
    nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU(), nn.Mish(), nn.LeakyReLU(0.1), nn.ELU(), nn.Softplus(),
    nn.Hardswish(), nn.Sigmoid(), nn.Tanh(), nn.ReLU()], ids=lambda m: repr(m))
def test_activation(activation):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), activation, nn.Linear(8, 3))
    train_and_compare(Sum(net), fixed((randn(5, 6, seed=1) * 2,), (randn(3, 6, seed=2) * 2,)), steps=3,
                      input_grad=True)


@pytest.mark.parametrize("activation, op", [(nn.SiLU(), "Silu"), (nn.Mish(), "Mish"), (nn.GELU(), "Gelu"),
                                            (nn.GELU(approximate="tanh"), "Gelu")],
                         ids=["silu", "mish", "gelu", "gelu_tanh"])
def test_silu_mish_and_gelu_are_one_engine_op_whose_gradient_reads_the_input(tmp_path, activation, op):
    # Written as their formulas' elementwise ops, both would stash every intermediate for backward.
    options = onnxtrain.DebugOptions(save_onnx=True, onnx_prefix="net", save_path=str(tmp_path), optimization_level=0)
    torch.manual_seed(0)
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(6, 8), activation, nn.Linear(8, 3)), debug_options=options)
    model(randn(5, 6, seed=1)).sum().backward()
    exported = onnx.load(str(tmp_path / "net_train_exported.onnx")).graph.node
    assert [(n.domain, n.op_type) for n in exported if n.domain or n.op_type in ("Sigmoid", "Erf", "Tanh")] == \
        [("ai.onnxtrain", op)]
    backward = onnx.load(str(tmp_path / "net_train_backward.onnx")).graph.node
    grads = [n for n in backward if n.op_type == op + "Grad"]
    assert len(grads) == 1 and grads[0].input[1] == exported[[n.op_type for n in exported].index(op)].input[0]


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_on_any_axis(dim, log):
    torch.manual_seed(0)
    layer = nn.LogSoftmax(dim) if log else nn.Softmax(dim)
    net = nn.Sequential(nn.Linear(4, 5), layer)
    train_and_compare(Sum(net), fixed((randn(2, 3, 4),)), steps=3, input_grad=True)


class Loss(nn.Module):
    def __init__(self, loss, classes=5, features=7):
        super().__init__()
        self.fc = nn.Linear(features, classes)
        self.loss = loss

    def forward(self, x, y):
        return self.loss(self.fc(x), y)


def class_targets(n, classes, seed=0, ignore=None):
    y = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))
    if ignore is not None:
        y[::3] = ignore
    return y


@pytest.mark.parametrize("kwargs", [
    {}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 2}, {"label_smoothing": 0.1},
    {"label_smoothing": 0.2, "ignore_index": 1, "reduction": "sum"},
    {"weight": torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25])},
    {"weight": torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25]), "ignore_index": 0, "label_smoothing": 0.05}],
    ids=lambda k: ",".join(f"{a}={'w' if a == 'weight' else b}" for a, b in k.items()) or "default")
def test_cross_entropy(kwargs):
    torch.manual_seed(0)
    loss = nn.CrossEntropyLoss(**kwargs)
    ignore = kwargs.get("ignore_index")
    data = fixed((randn(9, 7, seed=1), class_targets(9, 5, 1, ignore)), (randn(9, 7, seed=2), class_targets(9, 5, 2)))
    module = Loss(loss)
    if kwargs.get("reduction") == "none":
        module = Sum(module)
    train_and_compare(module, data, steps=3, input_grad=True)


def test_cross_entropy_over_a_sequence_dimension():
    torch.manual_seed(0)

    class SeqLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 6)

        def forward(self, x, y):
            return F.cross_entropy(self.fc(x).transpose(1, 2), y, ignore_index=5)

    y = torch.randint(0, 6, (2, 5), generator=torch.Generator().manual_seed(3))
    train_and_compare(SeqLoss(), fixed((randn(2, 5, 4), y)), steps=3, input_grad=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    torch.manual_seed(0)

    class Nll(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(7, 5)

        def forward(self, x, y):
            return F.nll_loss(F.log_softmax(self.fc(x), 1), y, reduction=reduction, ignore_index=4)

    module = Sum(Nll()) if reduction == "none" else Nll()
    train_and_compare(module, fixed((randn(8, 7), class_targets(8, 5, 4, ignore=4))), steps=3, input_grad=True)


@pytest.mark.parametrize("name,loss", [
    ("bce_logits", nn.BCEWithLogitsLoss()),
    ("bce_logits_pos_weight", nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 2.0, 0.5, 3.0, 1.0]))),
    ("l1", nn.L1Loss()), ("l1_sum", nn.L1Loss(reduction="sum")),
    ("mse", nn.MSELoss()), ("mse_sum", nn.MSELoss(reduction="sum"))])
def test_regression_and_binary_losses(name, loss):
    torch.manual_seed(0)
    target = torch.rand(6, 5, generator=torch.Generator().manual_seed(1))
    # Large logits too: the binary loss must stay finite where log(sigmoid(x)) would not.
    x = randn(6, 7) * (30 if name.startswith("bce") else 1)
    train_and_compare(Loss(loss), fixed((x, target)), steps=3, input_grad=True)


def test_conv1d_batchnorm1d_and_pooling_variants():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1), nn.BatchNorm1d(4), nn.ReLU(),
        nn.Conv1d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False),
        nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
        nn.Flatten())
    train_and_compare(Sum(net), fixed((randn(4, 3, 17),), (randn(4, 3, 17, seed=1),)), steps=3, input_grad=True)


def test_conv2d_groups_strides_and_pools():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(4, 8, 3, stride=(2, 1), padding=(1, 2), groups=2), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
        nn.AvgPool2d(2, count_include_pad=True, padding=1),
        nn.AdaptiveAvgPool2d(2))
    train_and_compare(Sum(net), fixed((randn(2, 4, 11, 9),)), steps=3, input_grad=True)


def test_batchnorm_eval_mode_uses_running_statistics():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU())
    model, ref = train_and_compare(Sum(net), fixed((randn(3, 2, 6, 6),)), steps=2)
    model.eval()
    ref.eval()
    x = randn(2, 2, 6, 6, seed=5)
    torch.testing.assert_close(model(x), ref(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_with_masks(batch_first):
    torch.manual_seed(0)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)

        def forward(self, x, key_padding_mask, attn_mask):
            out, weights = self.mha(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
            return out, weights

    seq, batch = 6, 3
    x = randn(batch, seq, 16) if batch_first else randn(seq, batch, 16)
    padding = torch.zeros(batch, seq, dtype=torch.bool)
    padding[1, 4:] = True
    causal = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
    loss = lambda out, _: out[0].pow(2).mean() + out[1].pow(2).sum()  # noqa: E731
    train_and_compare(Attention(), fixed((x, padding, causal)), loss, steps=3, input_grad=True)


def test_layer_norm_decomposed_below_opset_17_equivalent():
    # The decomposed form (ReduceMean/Sub/Pow/Sqrt/Div) as torch exports it below opset 17.
    torch.manual_seed(0)

    class ManualNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 6)
            self.gamma = nn.Parameter(torch.rand(6) + 0.5)
            self.beta = nn.Parameter(torch.zeros(6))

        def forward(self, x):
            h = self.fc(x)
            mean = h.mean(-1, keepdim=True)
            var = (h - mean).pow(2).mean(-1, keepdim=True)
            return (h - mean) / torch.sqrt(var + 1e-5) * self.gamma + self.beta

    train_and_compare(Sum(ManualNorm()), fixed((randn(4, 5),)), steps=3, input_grad=True)
