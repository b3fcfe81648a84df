"""onnxtrain's own translations on the torch.export capture (capture/torch_export/translations_*.py),
where onnxscript's ONNX differs from eager: the classification losses (each read inside the module
too, where a wrong type or shape would show), integer division, max/min
along a dim, and the opset-18 bitwise ops moved to the engine's twins. Each is checked against
eager over two steps (outputs and every parameter's gradient), with the torch.export backend named
explicitly so that nothing falls back, and the graph is checked to hold our nodes."""
import copy

import onnx
import pytest
import torch
import torch.nn.functional as F

import onnxtrain
from onnxtrain.capture import torch_export
from conftest import assert_close, assert_engine_ran

pytestmark = pytest.mark.skipif(torch_export.unavailable_reason() is not None,
                                reason=str(torch_export.unavailable_reason()))


@pytest.fixture(autouse=True)
def torch_export_only(monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE", "torch_export")


class Head(torch.nn.Module):
    """A Linear whose output `fn` maps to the results (with the further inputs)."""

    def __init__(self, fn, features=5):
        super().__init__()
        self.fn = fn
        self.fc = torch.nn.Linear(features, features)

    def forward(self, x, *extra):
        return self.fn(self.fc(x), *extra)


def graph_ops(model):
    (graphs, _, _), = model._graphs.values()
    return [(n.domain, n.op_type) for n in onnx.load_from_string(graphs.exported.model_bytes).graph.node]


def trains_like_eager(fn, inputs, steps=2):
    """Runs Head(fn) in the engine and eagerly on each step's inputs: outputs and gradients match."""
    torch.manual_seed(0)
    module = Head(fn)
    ref = copy.deepcopy(module)
    model = onnxtrain.ORTModule(module)
    for step in range(steps):
        args = inputs(step)
        out, expected = model(*args), ref(*args)
        outs = out if isinstance(out, tuple) else (out,)
        exps = expected if isinstance(expected, tuple) else (expected,)
        floats = [o for o in outs if o.is_floating_point()]
        assert_engine_ran(next(o for o in floats if o.requires_grad))
        for k, (o, e) in enumerate(zip(outs, exps)):
            assert o.dtype == e.dtype and o.shape == e.shape, (k, o.dtype, e.dtype, o.shape, e.shape)
            assert_close(o, e, f"step {step} output {k}")
        sum((o * (k + 1)).sum() for k, o in enumerate(floats)).backward()
        sum((e * (k + 1)).sum() for k, e in enumerate(x for x in exps if x.is_floating_point())).backward()
        for (name, p), q in zip(module.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, f"step {step} {name}.grad")
            p.grad, q.grad = None, None
    return model


def classes(step, batch=6, ignored=True):
    g = torch.Generator().manual_seed(step)
    target = torch.randint(0, 5, (batch + step,), generator=g)
    if ignored:
        target[1] = -100 if ignored is True else ignored
    return target


WEIGHT = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25])


def read_inside(loss):
    """The loss and ops of the module that read it, whose translation needs its type and shape."""
    return loss, loss.sum() * 2, (loss * 3).mean()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_with_class_targets(reduction, smoothing, weighted):
    weight = WEIGHT if weighted else None
    model = trains_like_eager(
        lambda y, t: read_inside(F.cross_entropy(y, t, weight=weight, reduction=reduction, label_smoothing=smoothing)),
        lambda step: (torch.randn(6 + step, 5), classes(step)))
    # Decomposed into LogSoftmax and nll_loss, ours; unreduced, gathered per position.
    ops = graph_ops(model)
    assert ("", "LogSoftmax") in ops and ("", "GatherElements" if reduction == "none" else
                                          "NegativeLogLikelihoodLoss") in ops, ops


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_class_probabilities(reduction):
    def inputs(step):
        return torch.randn(6 + step, 5), torch.softmax(torch.randn(6 + step, 5), dim=1)

    trains_like_eager(lambda y, p: read_inside(F.cross_entropy(y, p, weight=WEIGHT, reduction=reduction,
                                                               label_smoothing=0.1)), inputs)


def test_cross_entropy_of_one_sample_without_a_batch_dim():
    for reduction in ("mean", "none"):
        trains_like_eager(lambda y, t: read_inside(F.cross_entropy(y[0], t, reduction=reduction)),
                          lambda step: (torch.randn(3, 5), torch.tensor(step + 1)))


def test_cross_entropy_over_a_sequence_with_ignored_padding():
    """As HuggingFace's language models compute it: [batch, classes, positions], -100 for padding."""
    def inputs(step):
        target = torch.randint(0, 5, (2, 7 + step), generator=torch.Generator().manual_seed(step))
        target[:, -2:] = -100
        return torch.randn(2, 7 + step, 5), target

    for smoothing in (0.0, 0.1):
        trains_like_eager(lambda y, t: read_inside(F.cross_entropy(y.transpose(1, 2), t, label_smoothing=smoothing)),
                          inputs)
        trains_like_eager(lambda y, t: read_inside(F.cross_entropy(y.transpose(1, 2), t, reduction="none",
                                                                   label_smoothing=smoothing)), inputs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_with_weights_and_ignore_index(reduction):
    model = trains_like_eager(
        lambda y, t: read_inside(F.nll_loss(F.log_softmax(y, dim=1), t, weight=WEIGHT, reduction=reduction,
                                            ignore_index=2)),
        lambda step: (torch.randn(6 + step, 5), classes(step, ignored=2)))
    # Unreduced, the loss is gathered per position (the exporter loses NegativeLogLikelihoodLoss's rank).
    assert ("", "GatherElements" if reduction == "none" else "NegativeLogLikelihoodLoss") in graph_ops(model)


def test_max_and_min_along_a_dim_send_the_gradient_to_the_returned_index():
    # Rounded values tie often: eager's gradient goes to the index it returns, not split.
    model = trains_like_eager(lambda y: (*torch.max(y.mul(2).round(), 1), *y.mul(2).round().min(0, keepdim=True)),
                              lambda step: (torch.randn(6 + step, 5),))
    ops = graph_ops(model)
    assert ("", "GatherElements") in ops and ("", "ReduceMax") not in ops, ops


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8], ids=str)
def test_integer_division_remainder_fmod_and_bitwise_ops(dtype):
    def inputs(step):
        g = torch.Generator().manual_seed(step)
        low = 0 if dtype == torch.uint8 else -100
        a = torch.randint(low, 100, (4, 3 + step), generator=g).to(dtype)
        b = torch.randint(1, 9, (4, 3 + step), generator=g).to(dtype)
        if dtype.is_signed:
            b[0] = -b[0]
        return torch.randn(2, 5), a, b

    model = trains_like_eager(lambda y, a, b: (y, a // b, torch.div(a, b, rounding_mode="floor"),
                                               torch.div(a, b, rounding_mode="trunc"), a % b, torch.fmod(a, b),
                                               a % 7, a // 3, a & b, a | b, a ^ b, ~a, a << (b % 4), a >> (b % 4),
                                               a >> 1, torch.bitwise_left_shift(a, 2),
                                               torch.bitwise_right_shift(a, 3)), inputs)
    ops = graph_ops(model)
    for op in ("FloorDiv", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift"):
        assert ("ai.onnxtrain", op) in ops, (op, ops)


def test_float_floor_division_remainder_fmod_and_truncation():
    trains_like_eager(lambda y: (y.detach() // 0.3, torch.remainder(y, 0.7), torch.fmod(y, -0.4),
                                 torch.div(y, 0.3, rounding_mode="trunc"), torch.remainder(y, y.detach() + 3)),
                      lambda step: (torch.randn(6 + step, 5),))


def test_integer_division_by_zero_raises():
    model = onnxtrain.ORTModule(Head(lambda y, a, b: (y, a // b, a % b)))
    model(torch.randn(2, 5), torch.tensor([4, 5]), torch.tensor([1, 2]))
    with pytest.raises(Exception, match="division by zero"):
        model(torch.randn(2, 5), torch.tensor([4, 5]), torch.tensor([1, 0]))
