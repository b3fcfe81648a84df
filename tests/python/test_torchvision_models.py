"""torchvision's models (random init, small inputs) trained through the engine, against eager in
float32 and against eager in float64 as the floor (zoo_parity.py says how they are judged).

The numerics audit (zoo_audit.py) names the kernel instead: every model's worst node must stay
within zoo_audit.AUDIT_TOLERANCE, with oneDNN at the host's ISA and capped below it.
"""
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.vision_transformer import VisionTransformer

import conftest  # noqa: F401 - first: it puts the package on sys.path when run as a script
import zoo_audit  # noqa: E402
import zoo_parity  # noqa: E402

def vit():
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=10, dropout=0.0, attention_dropout=0.0)


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), 64),
    "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(num_classes=10), 64),
    "shufflenet_v2_x0_5": (lambda: torchvision.models.shufflenet_v2_x0_5(num_classes=10), 64),
    "regnet_y_400mf": (lambda: torchvision.models.regnet_y_400mf(num_classes=10), 64),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), 64),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(num_classes=10), 64),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), 64),
    "googlenet": (lambda: torchvision.models.googlenet(num_classes=10, aux_logits=False, init_weights=True), 64),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10), 64),
    "vit": (vit, 32),
}


def deterministic(model):
    """Dropout off; stochastic depth on but with survival rounding to 1 in float32, so that the
    engine's Bernoulli masks equal eager's while the export still carries them."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, torchvision.ops.StochasticDepth) and m.p > 0:
            m.p = 1e-9
    return model


BATCH = 2


def case(name):
    make, size = MODELS[name]

    def batch(gen):
        x = torch.randn(BATCH, 3, size, size, generator=gen)
        y = torch.randint(0, 10, (BATCH,), generator=gen)
        return (x,), {}, y

    return zoo_parity.Case(make=lambda: deterministic(make()), batch=batch,
                           loss=lambda logits, y: F.cross_entropy(logits, y), logits=lambda logits: logits)


def compare_with_eager(name):
    return zoo_parity.compare_with_float64(case(name))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torchvision_model_trains_at_the_float64_floor(name):
    problems = compare_with_eager(name).problems()
    assert not problems, f"{name}:\n" + "\n".join(problems[:20])


@pytest.mark.parametrize("isa", zoo_audit.isa_settings())
def test_torchvision_models_every_node_matches_its_float64_twin(isa):
    results = zoo_audit.audits_at(os.path.abspath(__file__), isa)
    assert sorted(results) == sorted(sorted(MODELS))
    zoo_audit.check_every_model(results)


if __name__ == "__main__":
    # The parity table of the closing notes: /usr/bin/python3 tests/python/test_torchvision_models.py
    # (--audit: the worst audited node of every model, as one JSON line)
    if sys.argv[1:2] == ["--audit"]:
        zoo_audit.run_as_script(sys.argv[2:] or sorted(MODELS), case)
        sys.exit(0)
    os.environ.setdefault("ONNXTRAIN_FALLBACK", "0")
    print(zoo_parity.TABLE_HEADER)
    for name in sys.argv[1:] or sorted(MODELS):
        print(zoo_parity.table_row(name, compare_with_eager(name)))
