"""Shape, index, reduction and math ops as torch exports them, through onnxtrain against PyTorch."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from parity import train_and_compare


class Fn(nn.Module):
    """A learnable input transform followed by the function under test, summed with fixed weights."""

    def __init__(self, fn, features=6):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.fn = fn

    def forward(self, x, *extra):
        out = self.fn(self.fc(x), *extra)
        outs = out if isinstance(out, tuple) else (out,)
        total = 0
        for o in outs:
            if o.is_floating_point():
                total = total + (o * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum()
        return total


def x(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


IDX = torch.tensor([[2, 0, 5], [1, 1, 4], [3, 3, 0], [5, 2, 1]])

CASES = {
    "slice_steps_and_negative": lambda h: h[:, 1:-1:2] * 2 + h[1:, -3:].sum(),
    "cat_split_chunk": lambda h: torch.cat(list(torch.split(h, [2, 4], 1))[::-1] + list(h.chunk(3, 1)), 1),
    "gather": lambda h: torch.gather(h, 1, IDX),
    "index_select_and_embedding_like": lambda h: h.index_select(1, torch.tensor([4, 0, 4, 2])),
    "expand_repeat_tile": lambda h: h.unsqueeze(1).expand(4, 3, 6) * h.repeat(1, 2).reshape(4, 2, 6)[:, :1],
    "where_and_comparisons": lambda h: torch.where((h > 0.1) & ~(h < -2) | (h == 0.5), h * 3, -h),
    "clamp_min_max": lambda h: torch.clamp(h, -0.5, 0.7) + torch.maximum(h, h.flip(1)) + torch.minimum(h, h * 0.5),
    "reductions": lambda h: (h.sum(1), h.mean(0, keepdim=True), h.amax(1), h.amin(0), torch.logsumexp(h, 1),
                             h.norm(dim=1), (h.abs() + 0.5).prod(1)),
    "math": lambda h: (h.abs() + 1).sqrt() + torch.exp(h * 0.3) + torch.log(h.abs() + 0.5) + (h.abs() + 1).reciprocal()
    + torch.pow(h.abs() + 0.1, 1.7) + torch.atan(h) + torch.asin(torch.tanh(h) * 0.9) + torch.acos(torch.tanh(h) * 0.9),
    "pow_tensor_exponent": lambda h: torch.pow(h.abs() + 0.5, torch.sigmoid(h)),
    "pad_constant_reflect_replicate": lambda h: (F.pad(h, (1, 2), value=0.5), F.pad(h.unsqueeze(0), (2, 1), "reflect"),
                                                 F.pad(h.unsqueeze(0), (3, 0), "replicate")),
    "triu_tril": lambda h: torch.triu(h, 1) + torch.tril(h, -1) * 2,
    "topk": lambda h: torch.topk(h, 3, dim=1)[0],
    "cumsum": lambda h: torch.cumsum(h, 1) + torch.cumsum(h, 0).flip(0),
    "scatter": lambda h: torch.zeros(4, 6).scatter(1, IDX[:, :2], h[:, :2]) + h.scatter(1, IDX[:, 2:], 0.0),
    "index_put": lambda h: h.index_put((torch.tensor([0, 2]), torch.tensor([1, 3])), torch.tensor([5.0, -1.0])),
    "einsum": lambda h: torch.einsum("ij,kj->ik", h, h) + torch.einsum("ij->j", h).sum(),
    "matmul_broadcast": lambda h: torch.matmul(h.reshape(2, 1, 2, 6), h.reshape(2, 6, 2)),
    "arange_and_shape_math": lambda h: h * torch.arange(h.shape[1]).to(h.dtype) / h.size(0),
    "transpose_permute_flatten": lambda h: h.reshape(2, 2, 6).permute(2, 0, 1).flatten(1) @ h[:, :2],
    "softmax_max_reduction": lambda h: torch.softmax(h, 0).max(1)[0],
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_parity(name):
    torch.manual_seed(0)
    data = [(x(4, 6, seed=1),), (x(4, 6, seed=2),)]
    train_and_compare(Fn(CASES[name]), lambda step: (data[step % 2], None), steps=3, input_grad=True, lr=0.01)
