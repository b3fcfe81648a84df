"""torchvision's models (random init, small inputs) trained through the engine, against eager in
float32 and against eager in float64 as the floor (zoo_parity.py says how they are judged).

The numerics audit (onnxtrain.audit) names the kernel instead: every node of one training step is
recomputed alone in float64 on its own inputs, so no flip upstream can move its error. Every
model's worst node must stay within AUDIT_TOLERANCE, with oneDNN at the host's ISA and capped
below it (ONEDNN_MAX_CPU_ISA, read once per process: one subprocess per setting).
"""
import functools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.vision_transformer import VisionTransformer

import conftest  # noqa: F401 - first: it puts the package on sys.path when run as a script
import onnxtrain  # noqa: E402
import zoo_parity  # noqa: E402

# Normalized per op family (src/audit/audit_compare.h); float32 rounding of the suite's models
# measures about 1e-6 at worst, a kernel error of 1e-4 or more is far above it.
AUDIT_TOLERANCE = 1e-5


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


# The If that torch 2.x's MultiheadAttention export adds has no single-node float64 twin (its body
# is several nodes): the audit reports it with that reason, which this test allows for control-flow
# nodes only.
CONTROL_FLOW = {"If", "Loop", "Scan"}


def audit_worst_nodes(names):
    """Per model: its worst node in one audited training step, and the nodes without a float64 twin."""
    results = {}
    for name in names:
        make, size = MODELS[name]
        torch.manual_seed(0)
        model = deterministic(make())
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(BATCH, 3, size, size, generator=gen)
        y = torch.randint(0, 10, (BATCH,), generator=gen)
        report = onnxtrain.audit(model, x, loss_fn=lambda logits: F.cross_entropy(logits, y))
        worst = report.worst(1)[0]
        results[name] = {"op_type": worst.op_type, "node": worst.node, "graph": worst.graph,
                         "rel_error": worst.rel_error, "nodes": len(report.rows),
                         "not_compared": [f"{r.op_type} {r.node}: {r.reason}" for r in report.not_compared
                                          if r.op_type not in CONTROL_FLOW]}
    return results


def oneDNN_isa_below_host():
    """The ONEDNN_MAX_CPU_ISA one step below this CPU: AVX2 under AVX-512, else SSE41."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return "AVX2" if "avx512f" in flags else "SSE41"


@functools.lru_cache(maxsize=None)
def audits_at(isa):
    """audit_worst_nodes of every model in a fresh process, oneDNN capped at `isa` (None: the host's)."""
    env = dict(os.environ, ONNXTRAIN_FALLBACK="0")
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa is not None:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--audit"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"the audit at ISA {isa or 'host'} failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cap", [False, True], ids=["host_isa", "isa_below_host"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torchvision_model_every_node_matches_its_float64_twin(name, cap):
    result = audits_at(oneDNN_isa_below_host() if cap else None)[name]
    assert not result["not_compared"], f"{name}: nodes without a float64 twin: {result['not_compared'][:5]}"
    assert result["rel_error"] <= AUDIT_TOLERANCE, (
        f"{name}: {result['graph']} {result['op_type']} {result['node']} is {result['rel_error']:.2e} from its "
        f"float64 twin, above {AUDIT_TOLERANCE:.0e}")


if __name__ == "__main__":
    # The parity table of the closing notes: /usr/bin/python3 tests/python/test_torchvision_models.py
    # (--audit: the worst audited node of every model, as one JSON line)
    os.environ.setdefault("ONNXTRAIN_FALLBACK", "0")
    if sys.argv[1:2] == ["--audit"]:
        print(json.dumps(audit_worst_nodes(sys.argv[2:] or sorted(MODELS))))
        sys.exit(0)
    print(zoo_parity.TABLE_HEADER)
    for name in sys.argv[1:] or sorted(MODELS):
        print(zoo_parity.table_row(name, compare_with_eager(name)))
