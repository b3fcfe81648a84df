"""Writes the torch side of ApiBatchNorm.MatchesTorchEager (tests/cpp/test_api_batchnorm.cc) into
argv[1]: a Conv -> BatchNorm -> ReLU -> Linear CNN exported in training mode
(torch.onnx.export(..., training=TrainingMode.TRAINING, do_constant_folding=False)), its batches,
and the state_dict after eager training with torch.optim.SGD(lr=0.05, momentum=0.9).

Files: model.onnx; x.bin (float32 [STEPS, BATCH, 3, 8, 8]); y.bin (int64 [STEPS, BATCH]); for each
parameter and running statistic, <name>.bin (float32); eval.bin (float64 [2]: eager's eval-mode
loss and accuracy over all STEPS * BATCH images); manifest.txt: one line "<parameter|state> <name>
<numel>" per tensor, state in the model's order. Raw little-endian bytes.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, BATCH, CLASSES = 6, 4, 3


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 8 * 8, CLASSES))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(STEPS, BATCH, 3, 8, 8) * 2 + 0.5
    y = torch.randint(0, CLASSES, (STEPS, BATCH))
    # Tracing in training mode runs the forward once, which updates the buffers: the model keeps the
    # statistics that the file holds, and trains on from there.
    torch.onnx.export(model.train(), (x[0],), os.path.join(out, "model.onnx"), export_params=True,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=14,
                      input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    x.numpy().astype("<f4").tofile(os.path.join(out, "x.bin"))
    y.numpy().astype("<i8").tofile(os.path.join(out, "y.bin"))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for s in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(model(x[s]), y[s]).backward()
        opt.step()
    parameters = dict(model.named_parameters())
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        for name, value in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            f.write(f"{'parameter' if name in parameters else 'state'} {name} {value.numel()}\n")
            value.numpy().astype("<f4").tofile(os.path.join(out, f"{name}.bin"))
    model.eval()
    with torch.no_grad():
        logits = model(x.reshape(STEPS * BATCH, 3, 8, 8))
    labels = y.reshape(-1)
    result = [F.cross_entropy(logits, labels).item(), (logits.argmax(1) == labels).double().mean().item()]
    np.array(result, dtype="<f8").tofile(os.path.join(out, "eval.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
