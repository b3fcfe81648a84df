"""timm models of many families (random init, 10 classes, small inputs, nothing downloaded)
trained through the engine, judged against eager float32 and the float64 floor over STEPS steps
(zoo_parity.py), on the capture this torch uses by default, with no fallback of either kind.

timm is installed per torch by scripts/torch_venv.sh; run as a script, this prints the README's
parity table of these models.
"""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import conftest  # noqa: F401 - first: it puts the package on sys.path when run as a script
import zoo_audit  # noqa: E402
import zoo_parity  # noqa: E402

pytestmark = pytest.mark.zoo

timm = pytest.importorskip("timm") if __name__ != "__main__" else __import__("timm")

BATCH, CLASSES = 2, 10
# name -> (family, input size, create_model arguments): small inputs, and for the transformers
# a patch and window size that fit them.
MODELS = {
    "resnet18": ("ResNet", 32, {}),
    "seresnext26d_32x4d": ("ResNeXt + squeeze-excitation", 32, {}),
    "resnest14d": ("ResNeSt (split attention)", 32, {}),
    "nf_resnet26": ("normalizer-free ResNet (weight standardization)", 32, {}),
    "efficientnet_b0": ("EfficientNet", 32, {}),
    "tinynet_e": ("TinyNet", 32, {}),
    "mobilenetv2_035": ("MobileNetV2", 64, {}),
    "mobilenetv3_small_050": ("MobileNetV3 (hard-swish)", 32, {}),
    "mnasnet_small": ("MnasNet", 32, {}),
    "semnasnet_050": ("MnasNet (semnasnet, squeeze-excitation)", 64, {}),
    "ghostnet_050": ("GhostNet", 32, {}),
    "rexnet_100": ("ReXNet", 64, {}),
    "regnetx_002": ("RegNet", 32, {}),
    "densenet121": ("DenseNet", 64, {}),
    "dpn68": ("dual-path network", 32, {}),
    "repvgg_a0": ("RepVGG", 32, {}),
    "gernet_s": ("GENet (ByobNet)", 32, {}),
    "convnext_atto": ("ConvNeXt", 32, {}),
    "vit_tiny_patch16_224": ("ViT", 32, {"img_size": 32, "patch_size": 8}),
    "deit_tiny_patch16_224": ("DeiT", 32, {"img_size": 32, "patch_size": 8}),
    "cait_xxs24_224": ("CaiT (class attention)", 32, {"img_size": 32, "patch_size": 8, "depth": 2}),
    "xcit_nano_12_p16_224": ("XCiT (cross-covariance attention)", 32, {"img_size": 32, "patch_size": 8}),
    "pit_ti_224": ("PiT (pooling transformer)", 64, {"img_size": 64}),
    "swin_tiny_patch4_window7_224": ("Swin (shifted windows)", 64, {
        "img_size": 64, "window_size": 4, "depths": (1, 1, 1, 1), "embed_dim": 32, "num_heads": (1, 1, 2, 2)}),
    "levit_128s": ("LeViT", 64, {"img_size": 64}),
    "mobilevit_xxs": ("MobileViT", 64, {}),
    "edgenext_xx_small": ("EdgeNeXt", 64, {}),
    "poolformer_s12": ("PoolFormer (MetaFormer)", 32, {}),
    "mixer_s16_224": ("MLP-Mixer", 32, {"img_size": 32}),
    "hrnet_w18_small": ("HRNet", 32, {}),
}


def make(name):
    _, _, arguments = MODELS[name]
    try:
        return timm.create_model(name, pretrained=False, num_classes=CLASSES, drop_rate=0.0, drop_path_rate=0.0,
                                 **arguments)
    except TypeError as e:  # a family without stochastic depth
        if "drop_path_rate" not in str(e):
            raise
        return timm.create_model(name, pretrained=False, num_classes=CLASSES, drop_rate=0.0, **arguments)


def case(name, size=None):
    """`size`: the images' side (default: the model's entry in MODELS)."""
    size = size or MODELS[name][1]

    def batch(gen):
        x = torch.randn(BATCH, 3, size, size, generator=gen)
        return (x,), {}, torch.randint(0, CLASSES, (BATCH,), generator=gen)

    return zoo_parity.Case(make=lambda: make(name), batch=batch, loss=lambda logits, y: F.cross_entropy(logits, y),
                           logits=lambda logits: logits)


# Larger images for the step comparison where the default ones leave it to chance: at 32 pixels
# efficientnet_b0's last BatchNorms normalize a batch of 4 over 1x1 maps, and how a host's oneDNN
# blocks its float32 GEMMs (by the CPU's caches) decided whether it passed: on a Xeon with AMX its
# stem's weight gradient was 2.2e+02 from float64 by zoo_parity's measure, against eager float32's
# 1.1e+00, while every node matched its float64 twin (the audit below); at 64 pixels it passes.
FLOOR_SIZE = {"efficientnet_b0": 64}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_timm_model_trains_at_the_float64_floor(name, no_fallback):
    problems = zoo_parity.compare_with_float64(case(name, FLOOR_SIZE.get(name))).problems()
    assert not problems, f"{name}:\n" + "\n".join(problems[:20])


# The models whose eager float32 run is itself more than 1e-2 from float64 in some gradient (the
# README's table): most are mobile CNNs whose last BatchNorms normalize a batch of 2 over maps of
# one or two pixels. The step comparison above cannot tell a kernel error of that size from their
# rounding, so the audit judges their kernels node by node, at the host's ISA and below it.
# semnasnet_050 is one of them at 64 pixels (`python tests/python/test_timm_models.py semnasnet_050`
# prints its distances); at 32 its last maps are 1x1 and no comparison with eager can judge it.
# test_step_state.py shows that nothing between its steps departs from a fresh engine.
ILL_CONDITIONED = ["densenet121", "dpn68", "efficientnet_b0", "ghostnet_050", "hrnet_w18_small", "levit_128s",
                   "mnasnet_small", "mobilenetv2_035", "mobilenetv3_small_050", "rexnet_100", "semnasnet_050",
                   "tinynet_e"]


@pytest.mark.parametrize("isa", zoo_audit.isa_settings())
def test_ill_conditioned_timm_models_every_node_matches_its_float64_twin(isa):
    results = zoo_audit.audits_at(os.path.abspath(__file__), isa)
    assert sorted(results) == sorted(ILL_CONDITIONED)
    zoo_audit.check_every_model(results)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--audit"]:
        zoo_audit.run_as_script(sys.argv[2:] or ILL_CONDITIONED, case)
        sys.exit(0)
    zoo_parity.without_fallback()
    zoo_parity.print_table(sys.argv[1:] or sorted(MODELS), case, label=lambda name: f"{name} ({MODELS[name][0]})")
