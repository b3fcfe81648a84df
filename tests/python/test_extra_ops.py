"""Det, GridSample, MaxUnpool, Unique and NonMaxSuppression as torch 1.13 exports them, through
onnxtrain against PyTorch eager: outputs, parameter gradients and input gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxtrain
from conftest import assert_close, assert_engine_ran
from parity import train_and_compare


def randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def weighted_sum(out):
    return (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum()


class Determinants(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(9, 9)

    def forward(self, x):
        a = self.fc(x).reshape(-1, 3, 3)
        return weighted_sum(torch.det(a)) + weighted_sum(torch.linalg.det(a.transpose(1, 2) + a))


def test_det_batched_matches_torch():
    data = [randn(4, 9, seed=1), randn(4, 9, seed=2)]
    train_and_compare(Determinants(), lambda step: ((data[step % 2],), None), steps=3, input_grad=True, lr=0.01)


class ScaledDet(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, a):
        return weighted_sum(torch.det(a * self.scale))


def cofactors(a):
    """The cofactor matrix from minors: d det(A) / dA, defined for singular A too."""
    n = a.shape[-1]
    out = torch.empty_like(a)
    for i in range(n):
        for j in range(n):
            rows = [r for r in range(n) if r != i]
            cols = [c for c in range(n) if c != j]
            out[..., i, j] = (-1) ** (i + j) * torch.det(a[..., rows, :][..., :, cols])
    return out


@pytest.mark.parametrize("name,matrix", [
    ("rank_m_minus_1", [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),
    ("rank_m_minus_2", [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]),
])
def test_det_gradient_of_singular_matrices_is_the_cofactor_matrix(name, matrix):
    """At an exactly singular matrix torch 1.13 returns a zero gradient (pytorch/pytorch#80761,
    #104675), discontinuous with its neighbours; onnxtrain returns the true derivative, the
    cofactor matrix. The invertible matrix beside it is compared with eager as usual."""
    a = torch.tensor([matrix, [[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 1.0]]])
    module, ref = ScaledDet(), ScaledDet()
    model = onnxtrain.ORTModule(module)
    ours, theirs = a.clone().requires_grad_(), a.clone().requires_grad_()
    out, ref_out = model(ours), ref(theirs)
    assert_engine_ran(out)
    assert_close(out, ref_out, f"{name} det")
    out.backward()
    ref_out.backward()
    weights = torch.linspace(-1, 1, 2).reshape(2, 1, 1)
    assert_close(ours.grad, weights * cofactors(a), f"{name} input grad")
    assert_close(ours.grad[1], theirs.grad[1], f"{name} input grad of the invertible matrix")
    # d/dscale det(s A) = 3 s^2 det(A) = 3 det(A) at s = 1, singular or not.
    assert_close(module.scale.grad, ref.scale.grad, f"{name} scale grad")


class Sampler(nn.Module):
    """A learnable image and a learnable grid offset, sampled with grid_sample."""

    def __init__(self, mode, padding_mode, align_corners):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)
        self.shift = nn.Parameter(torch.tensor([0.05, -0.1]))
        self.options = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    def forward(self, image, grid):
        out = F.grid_sample(self.conv(image), grid + self.shift, **self.options)
        return weighted_sum(out)


GRID_SAMPLE_CASES = [
    ("bilinear", "zeros", False),
    ("bilinear", "border", True),
    ("bilinear", "reflection", False),
    ("nearest", "zeros", True),
    ("nearest", "reflection", False),
    ("bicubic", "zeros", False),
    ("bicubic", "border", True),
    ("bicubic", "reflection", True),
]


@pytest.mark.parametrize("mode,padding_mode,align_corners", GRID_SAMPLE_CASES)
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    torch.manual_seed(0)
    data = [(randn(2, 2, 5, 6, seed=3 + s), randn(2, 4, 3, 2, seed=5 + s, scale=0.8)) for s in range(2)]
    train_and_compare(Sampler(mode, padding_mode, align_corners), lambda step: (data[step % 2], None), steps=2,
                      input_grad=True, lr=0.01)


class Unpool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        pooled, indices = F.max_pool2d(self.conv(x), 2, return_indices=True)
        up2d = F.max_unpool2d(pooled * 2, indices, 2, output_size=x.shape[2:])
        row = x.flatten(2)[:, :, :8]
        pooled1d, indices1d = F.max_pool1d(row, 2, return_indices=True)
        return weighted_sum(up2d) + weighted_sum(F.max_unpool1d(pooled1d, indices1d, 2))


def test_max_unpool_matches_torch():
    data = [randn(2, 2, 5, 4, seed=7), randn(2, 2, 5, 4, seed=8)]
    train_and_compare(Unpool(), lambda step: ((data[step % 2],), None), steps=2, input_grad=True, lr=0.01)


class CountWeighted(nn.Module):
    """Unique's integer outputs steer a differentiable computation (Unique itself has no gradient)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, labels):
        values, inverse, counts = torch.unique(labels, sorted=True, return_inverse=True, return_counts=True)
        rows, row_inverse = torch.unique(labels.reshape(-1, 2), dim=0, return_inverse=True)
        per_row = row_inverse.unsqueeze(1).expand(-1, 2).reshape(-1)
        weight = (counts[inverse] + values[inverse] + per_row).to(x.dtype)
        return weighted_sum(self.fc(x) * weight.unsqueeze(1)) + rows.sum().to(x.dtype)


def test_unique_matches_torch():
    labels = torch.tensor([3, 1, 3, 3, 1, 7, 2, 7])
    data = [randn(8, 4, seed=9), randn(8, 4, seed=10)]
    train_and_compare(CountWeighted(), lambda step: ((data[step % 2], labels), None), steps=2, input_grad=True,
                      lr=0.01)


def test_non_max_suppression_matches_torchvision():
    torchvision = pytest.importorskip("torchvision")

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, boxes, scores, features):
            keep = torchvision.ops.nms(boxes, scores, 0.4)
            return weighted_sum(self.fc(features)[keep])

    corner = torch.rand(12, 2, generator=torch.Generator().manual_seed(11)) * 10
    boxes = torch.cat([corner, corner + 2 + torch.rand(12, 2, generator=torch.Generator().manual_seed(12)) * 4], 1)
    scores = torch.rand(12, generator=torch.Generator().manual_seed(13))
    features = randn(12, 4, seed=14)
    train_and_compare(Detector(), lambda step: ((boxes, scores, features), None), steps=2, lr=0.01)


class FakeQuantized(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.fake_quantize_per_tensor_affine(self.fc(x), 0.1, 0, -128, 127).sum()


def test_training_through_fake_quantization_is_refused_naming_the_node():
    """torch exports fake quantization as QuantizeLinear + DequantizeLinear: the int8 value in
    between would end the gradient chain without a word."""
    import onnxtrain
    model = onnxtrain.ORTModule(FakeQuantized())
    with pytest.raises(Exception, match="QuantizeLinear.*quantization-aware training is not supported"):
        model(torch.randn(2, 4)).backward()
