"""The digits data both parts of the demo train on: scikit-learn's 8x8 handwritten digits, scaled to
[0, 1], shuffled with a seeded generator and split 80/20."""
import torch
from sklearn.datasets import load_digits


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])
