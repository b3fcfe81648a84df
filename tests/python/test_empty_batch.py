"""A batch of size 0 runs end to end as in eager: empty outputs, a NaN mean loss, zero gradients
and unchanged buffers, in training and in eval, on MLPs, CNNs and Transformers."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_engine_ran


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, 3, groups=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, tokens):
        return self.head(self.layer(self.embed(tokens)).mean(1))


MODELS = {
    "mlp": (mlp, lambda n: torch.randn(n, 6)),
    "cnn": (cnn, lambda n: torch.randn(n, 3, 8, 8)),
    "transformer": (Encoder, lambda n: torch.randint(0, 11, (n, 5))),
}


def assert_same(a, b, what):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_empty_batch_like_eager(name, training):
    make, data = MODELS[name]
    torch.manual_seed(0)
    ref = make()
    model = onnxtrain.ORTModule(copy.deepcopy(ref))
    ref.train(training)
    model.train(training)
    # A full batch first, so that the empty one reuses the graph with a new shape, then one alone.
    for n in (4, 0, 0, 3):
        x = data(n)
        target = torch.randint(0, 3, (n,))
        out = model(x)
        expected = ref(x)
        assert out.shape == expected.shape
        assert_engine_ran(out)
        loss = F.cross_entropy(out, target)
        expected_loss = F.cross_entropy(expected, target)
        assert_same(loss, expected_loss, f"{name} batch {n} loss")
        model.zero_grad(set_to_none=False)
        ref.zero_grad(set_to_none=False)
        loss.backward()
        expected_loss.backward()
        for (pname, p), q in zip(model.named_parameters(), ref.parameters()):
            assert_same(p.grad, q.grad, f"{name} batch {n} grad of {pname}")
        for (bname, b), c in zip(model.named_buffers(), ref.buffers()):
            assert_same(b, c, f"{name} batch {n} buffer {bname}")


def test_empty_batch_under_no_grad():
    torch.manual_seed(0)
    ref = cnn().eval()
    model = onnxtrain.ORTModule(copy.deepcopy(ref)).eval()
    with torch.no_grad():
        out = model(torch.randn(0, 3, 8, 8))
    assert out.shape == (0, 3)
    assert model.engine_runs == 1
