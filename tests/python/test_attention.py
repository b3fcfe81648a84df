"""F.scaled_dot_product_attention (torch 2.x) through the engine against eager: every mask form,
an explicit scale, and a dropout that really drops in training. Each capture writes it its own way
(capture/torch_export/translations_attention.py, capture/torchscript/symbolics_attention.py)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_engine_ran
from parity import train_and_compare

pytestmark = pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"),
                                reason=f"torch {torch.__version__} has no scaled_dot_product_attention")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class SelfAttention(nn.Module):
    def __init__(self, causal=False, scale=None, dim=16, heads=2):
        super().__init__()
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.causal, self.scale, self.heads = causal, scale, heads

    def forward(self, x, mask=None):
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        kwargs = {} if self.scale is None else {"scale": self.scale}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, **kwargs)
        y = self.out(o.transpose(1, 2).reshape(batch, length, dim))
        return (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum()


def bool_mask(length, seed, blind_row=None):
    mask = randn(length, length, seed=seed) > 0
    mask[:, 0] = True  # every query position attends to something
    if blind_row is not None:
        mask[blind_row] = False  # but this one: eager gives it zero weights
    return mask


def float_mask(length, seed, blind_row=None):
    mask = randn(length, length, seed=seed)
    if blind_row is not None:
        mask[blind_row] = -float("inf")
    return mask


TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
# On torch 2.x both captures export attention: torch.export through translations_attention.py, and
# TorchScript (under autocast, or named) through onnxtrain's own symbolic (symbolics_attention.py).
CAPTURES = ["default"] + (["torchscript"] if TORCH_2 else [])


@pytest.fixture(params=CAPTURES)
def capture(request, monkeypatch):
    if request.param != "default":
        monkeypatch.setenv("ONNXTRAIN_CAPTURE", request.param)
    return request.param


@pytest.mark.parametrize("form", ["none", "bool", "float", "causal", "scale", "bool_blind_row", "float_blind_row"])
def test_attention_trains_as_eager(form, capture):
    torch.manual_seed(0)
    module = SelfAttention(causal=form == "causal", scale=0.3 if form == "scale" else None)
    masks = {"bool": lambda s: bool_mask(7, s), "float": lambda s: float_mask(7, s),
             "bool_blind_row": lambda s: bool_mask(7, s, blind_row=s % 7),
             "float_blind_row": lambda s: float_mask(7, s, blind_row=s % 7)}

    def batch(step):
        x = randn(3, 7, 16, seed=step)
        return ((x, masks[form](10 + step)) if form in masks else (x,)), None

    train_and_compare(module, batch, steps=3, input_grad=True)


class GroupedQueryAttention(nn.Module):
    """Llama's shape of attention: 4 query heads share 2 key/value heads, causal."""

    def __init__(self, dim=16, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q, self.kv, self.out = nn.Linear(dim, dim), nn.Linear(dim, 2 * kv_heads * self.head_dim), nn.Linear(dim, dim)

    def forward(self, x):
        batch, length, dim = x.shape
        q = self.q(x).reshape(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).reshape(batch, length, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y = self.out(o.transpose(1, 2).reshape(batch, length, dim))
        return (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum()


@pytest.mark.skipif(tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 5),
                    reason="enable_gqa came with torch 2.5")
def test_grouped_query_attention_trains_as_eager(capture):
    torch.manual_seed(0)
    train_and_compare(GroupedQueryAttention(), lambda step: ((randn(2, 5, 16, seed=step),), None), steps=3,
                      input_grad=True)


class DroppedWeights(nn.Module):
    """With V the identity, the output is the attention weights as dropout left them."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Parameter(randn(1, 2, 6, 4, seed=1)), nn.Parameter(randn(1, 2, 6, 4, seed=2))

    def forward(self, v):
        return F.scaled_dot_product_attention(self.q, self.k, v, dropout_p=0.5 if self.training else 0.0)


def test_attention_dropout_drops_in_training_and_scales_what_it_keeps():
    module = DroppedWeights()
    weights = torch.softmax(module.q @ module.k.transpose(-1, -2) / 2, -1).detach()
    model = onnxtrain.ORTModule(module)
    out = model(torch.eye(6).expand(1, 2, 6, 6).contiguous())
    assert_engine_ran(out)
    kept = out != 0
    assert 0.25 < kept.float().mean() < 0.75, f"{kept.float().mean():.2f} of the weights kept at dropout_p=0.5"
    torch.testing.assert_close(out[kept], 2 * weights[kept], rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert module.q.grad is not None and module.q.grad.abs().sum() > 0
    model.eval()
    torch.testing.assert_close(model(torch.eye(6).expand(1, 2, 6, 6).contiguous()), weights, rtol=1e-5, atol=1e-6)
