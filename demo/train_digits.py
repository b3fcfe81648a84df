"""Main job: train an MLP on scikit-learn's 8x8 handwritten digits with onnxtrain, and the same
model with plain PyTorch, from the same initial weights and batches.

Prints per-epoch loss and test accuracy for both, and the median time per training step. onnxtrain's
side uses onnxtrain.optim.SGD, the fused drop-in for torch.optim.SGD (same arithmetic)."""
import argparse
import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

import onnxtrain
from digits_data import load_data


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).float().mean().item()
    model.train()
    return correct


def step(model, opt, x, y):
    start = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item(), time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    eager = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    opt = onnxtrain.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # torch.optim.SGD's fused twin
    eager_opt = torch.optim.SGD(eager.parameters(), lr=args.lr, momentum=0.9)

    print(f"digits: {len(x_train)} training and {len(x_test)} test images of 8x8 pixels, 10 classes")
    print(f"model: {net}")
    ours, theirs = [], []
    steps_per_epoch = (len(x_train) + args.batch_size - 1) // args.batch_size
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(1000 + epoch))
        losses, eager_losses = [], []
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch + 1:2d}/{args.epochs}", ncols=100, leave=False,
                   mininterval=0.25)
        for i in bar:
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            x, y = x_train[idx], y_train[idx]
            # Alternate which contender goes first so neither always meets a warm cache.
            if i % 2 == 0:
                loss, t = step(model, opt, x, y)
                eager_loss, te = step(eager, eager_opt, x, y)
            else:
                eager_loss, te = step(eager, eager_opt, x, y)
                loss, t = step(model, opt, x, y)
            losses.append(loss)
            eager_losses.append(eager_loss)
            if epoch > 0 or i >= 5:  # the first steps include export and graph building
                ours.append(t)
                theirs.append(te)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        print(f"epoch {epoch + 1:2d}: loss onnxtrain {statistics.mean(losses):.4f} | pytorch "
              f"{statistics.mean(eager_losses):.4f}   test accuracy onnxtrain {accuracy(model, x_test, y_test):.3f}"
              f" | pytorch {accuracy(eager, x_test, y_test):.3f}")

    assert model.fallback_reason is None, model.fallback_reason
    med, med_eager = statistics.median(ours), statistics.median(theirs)
    print(f"\nmedian step time (forward + backward + SGD): onnxtrain {1e3 * med:.3f} ms, "
          f"pytorch {1e3 * med_eager:.3f} ms, ratio onnxtrain/pytorch {med / med_eager:.2f}")
    drift = max((p - q).abs().max().item() for p, q in zip(net.parameters(), eager.parameters()))
    print(f"largest parameter difference after training: {drift:.2e}")


if __name__ == "__main__":
    main()
