"""Writes the torch side of ApiTraining.MatchesTorchEager (tests/cpp/test_api_training.cc) into
argv[1]: an MLP exported with torch.onnx.export(export_params=True), its batches, and the weights
after torch eager training with torch.optim.SGD(momentum) and torch.optim.AdamW.

Files: model.onnx; x.bin (float32 [STEPS, BATCH, 8]); y.bin (int64 [STEPS, BATCH]); for each
optimizer and parameter, <optimizer>.<name>.bin (float32); losses.<optimizer>.bin (float64
[STEPS]); manifest.txt: one line "<parameter> <dim> ..." per parameter. Raw little-endian bytes.
The hyperparameters must match the C++ test's.
"""
import copy
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

STEPS, BATCH = 5, 16
OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05),
}


def main(out):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(STEPS, BATCH, 8)
    y = torch.randint(0, 4, (STEPS, BATCH))
    torch.onnx.export(model, (x[0],), os.path.join(out, "model.onnx"), export_params=True, opset_version=13,
                      input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    x.numpy().astype("<f4").tofile(os.path.join(out, "x.bin"))
    y.numpy().astype("<i8").tofile(os.path.join(out, "y.bin"))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        for name, p in model.named_parameters():
            f.write(" ".join([name] + [str(d) for d in p.shape]) + "\n")
    for opt_name, make in OPTIMIZERS.items():
        m = copy.deepcopy(model)
        opt = make(m.parameters())
        losses = []
        for s in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(m(x[s]), y[s])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.array(losses, dtype="<f8").tofile(os.path.join(out, f"losses.{opt_name}.bin"))
        for name, p in m.named_parameters():
            p.detach().numpy().astype("<f4").tofile(os.path.join(out, f"{opt_name}.{name}.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
