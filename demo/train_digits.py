"""Main job: train a small convolutional network on scikit-learn's 8x8 handwritten digits with
onnxtrain, and the same network with plain PyTorch, from the same initial weights and batches.

Each contender trains in a fresh process of its own, one after the other, with the same number of
threads (two rounds, the order swapped in the second), so neither shares cores, caches or a thread
pool with the other. Prints both runs' per-epoch loss and test accuracy, then the median step time
of each and what the ratio means. onnxtrain's side uses onnxtrain.optim.SGD, the fused drop-in for
torch.optim.SGD (the same arithmetic)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from digits_data import load_data

CONTENDERS = ("onnxtrain", "pytorch")


def make_net():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).float().mean().item()
    model.train()
    return correct


def train(contender, args):
    """One contender's whole run, in this process: per-epoch figures, step times, final weights."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    x_train, x_test = x_train.view(-1, 1, 8, 8), x_test.view(-1, 1, 8, 8)
    net = make_net()
    if contender == "onnxtrain":
        import onnxtrain
        onnxtrain.set_num_threads(args.threads)
        model = onnxtrain.ORTModule(net)
        opt = onnxtrain.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        model, opt = net, torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    steps_per_epoch = (len(x_train) + args.batch_size - 1) // args.batch_size
    epochs, times, on_engine = [], [], []
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(1000 + epoch))
        losses = []
        for i in range(steps_per_epoch):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            engine_runs = getattr(model, "engine_runs", 0)
            t = time.perf_counter()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
            on_engine.append(getattr(model, "engine_runs", 0) > engine_runs)
            losses.append(loss.item())
        epochs.append((statistics.mean(losses), accuracy(model, x_test, y_test)))
    total = time.perf_counter() - start
    if contender == "onnxtrain":
        assert model.fallback_reason is None, model.fallback_reason
    return dict(epochs=epochs, times=times, on_engine=on_engine, total=total,
                weights=[p.detach().flatten().tolist() for p in net.parameters()])


def spawn(contender, args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--contender", contender, "--out", out]
        for name in ("epochs", "batch_size", "lr", "seed", "threads"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="threads of each contender (the same for both)")
    parser.add_argument("--rounds", type=int, default=2, help="fresh-process runs of each contender, order alternating")
    parser.add_argument("--contender", choices=CONTENDERS, help=argparse.SUPPRESS)  # one run, in this process
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender:
        with open(args.out, "w") as f:
            json.dump(train(args.contender, args), f)
        return

    (x_train, _), (x_test, _) = load_data(args.seed)
    print(f"digits: {len(x_train)} training and {len(x_test)} test images of 8x8 pixels, 10 classes")
    print(f"model: {make_net()}")
    print(f"each contender trains {args.epochs} epochs in a fresh process of its own at {args.threads} thread(s), "
          f"{args.rounds} rounds, the order alternating")
    runs = {c: [] for c in CONTENDERS}
    for r in range(args.rounds):
        for contender in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
            runs[contender].append(spawn(contender, args))
    ours, theirs = runs["onnxtrain"][0], runs["pytorch"][0]
    for epoch, ((loss, acc), (eager_loss, eager_acc)) in enumerate(zip(ours["epochs"], theirs["epochs"])):
        print(f"epoch {epoch + 1:2d}: loss onnxtrain {loss:.4f} | pytorch {eager_loss:.4f}   "
              f"test accuracy onnxtrain {acc:.3f} | pytorch {eager_acc:.3f}")
    drift = max(abs(a - b) for p, q in zip(ours["weights"], theirs["weights"]) for a, b in zip(p, q))
    print(f"largest parameter difference after training: {drift:.2e}")

    # onnxtrain's steady step is the median of the steps its engine ran; its first steps ran in eager
    # PyTorch while the capture went on beside them (the eager warm-up).
    engine = [statistics.median([t for t, e in zip(run["times"], run["on_engine"]) if e]) for run in runs["onnxtrain"]]
    eager = [statistics.median(run["times"][5:]) for run in runs["pytorch"]]
    med, med_eager = statistics.median(engine), statistics.median(eager)
    warm = [run["on_engine"].index(True) if True in run["on_engine"] else len(run["on_engine"])
            for run in runs["onnxtrain"]]
    total, total_eager = (statistics.median(run["total"] for run in runs[c]) for c in CONTENDERS)
    ratio = med / med_eager
    print(f"\nmedian step time (forward + backward + SGD), median of {args.rounds} processes each: onnxtrain "
          f"{1e3 * med:.3f} ms ({', '.join(f'{1e3 * t:.3f}' for t in engine)}), pytorch {1e3 * med_eager:.3f} ms "
          f"({', '.join(f'{1e3 * t:.3f}' for t in eager)}), ratio onnxtrain/pytorch {ratio:.2f}")
    eager_steps = f"{min(warm)}" if min(warm) == max(warm) else f"{min(warm)}-{max(warm)}"
    print(f"whole run ({len(ours['times'])} steps and {args.epochs} evaluations): onnxtrain {total:.2f} s, "
          f"pytorch {total_eager:.2f} s; onnxtrain's first {eager_steps} steps ran in eager PyTorch while the "
          "engine captured the model beside them")
    if ratio < 0.95:
        verdict = f"onnxtrain's step takes {ratio:.2f} of PyTorch's: the engine is faster on this model and machine"
    elif ratio <= 1.05:
        verdict = "the two steps are within 5% of each other: no speedup on this model and machine"
    else:
        verdict = f"onnxtrain's step takes {ratio:.2f} x PyTorch's: the engine is slower on this model and machine"
    print(f"what it means: {verdict}; the figure is this small CNN's (bench/run measures the model zoo).")


if __name__ == "__main__":
    main()
