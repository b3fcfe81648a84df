"""Second part of the demo, the Python half: writes the digits MLP of train_digits.py (same seed,
same initial weights) as an ONNX model and the training and test sets as .npz, for the
command-line tool to train with no Python (demo/train_digits_cli.sh).
    python3 demo/export_digits.py OUT_DIR"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

from digits_data import load_data


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seed = 0
    torch.manual_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_data(seed)
    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    torch.onnx.export(net, x_train[:2], os.path.join(out, "digits.onnx"), export_params=True,
                      input_names=["pixels"], output_names=["logits"],
                      dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}})
    np.savez(os.path.join(out, "train.npz"), x=x_train.numpy(), y=y_train.numpy())
    np.savez(os.path.join(out, "test.npz"), x=x_test.numpy(), y=y_test.numpy())
    print(f"wrote {out}/digits.onnx, train.npz ({len(x_train)} images), test.npz ({len(x_test)} images)")


if __name__ == "__main__":
    main()
