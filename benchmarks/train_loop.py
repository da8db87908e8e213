"""Is ``train`` as fast as a bare PyTorch loop? The loop's own cost, with a model whose compute is near zero.

The same tensors (MNIST, already in memory, flattened), ``nn.Linear(784, 10)``, Adam and batch 128, run
through ``hetlab.core.train.train`` (``timing`` off) and through a bare loop of six lines: data on the
device, one permutation per epoch, nothing read back. Alternated, each run timed whole (wall clock, and
this process's CPU time beside it: less moved by other processes), the order alternating. Then one epoch of each under
``opcount.py`` (beside it): torch operations and host reads per step (on a card each operation is a launch
and each read a wait).

    .venv/bin/python benchmarks/train_loop.py [--samples 30000] [--epochs 2] [--repeats 5] [--device cpu]

Goal (issue 60): train ÷ bare ≥ 0.9 (median), and the same operations per step. The last line printed is
one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from hetlab.core.data import load_mnist
from hetlab.core.devices import resolve, synchronize
from hetlab.core.train import train
from opcount import count_ops   # beside this script

BATCH = 128


def model(dev) -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(784, 10).to(dev)


def bare(x, y, epochs: int, dev) -> None:
    """The six-line loop: one permutation per epoch, slices, zero_grad / forward / backward / step."""
    net, gen = model(dev), torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen).to(dev)
        xs, ys = x[order], y[order]
        for i in range(0, len(y), BATCH):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(xs[i:i + BATCH]), ys[i:i + BATCH]).backward()
            opt.step()
    synchronize(dev)   # its work done, so that the clock holds it (nothing read back)


def hetlab(x, y, epochs: int, dev, progress: bool = False) -> None:
    """``train`` as a learner calls it: data on the CPU (on a card its one copy there is in the time)."""
    train(model(dev), (x.cpu(), y.cpu()), epochs=epochs, batch_size=BATCH, device=dev, progress=progress)


def timed(fn, *args) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a CPU run)")
    parser.add_argument("--progress", action="store_true", help="train with its progress bar (the default a learner sees)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev = resolve(args.device)
    data = load_mnist("train").subset(args.samples, seed=0)
    x, y = data.normalized().flatten(1).to(dev), data.labels.to(dev)
    n = args.samples * args.epochs
    runs = {"bare": (bare, ()), "train": (hetlab, (args.progress,))}
    for fn, extra in runs.values():
        fn(x, y, 1, dev, *extra)   # warm-up, untimed: allocator, first kernels, imports
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for r in range(args.repeats):
        for name in (list(runs) if r % 2 == 0 else reversed(list(runs))):   # the order alternates too
            fn, extra = runs[name]
            w, c = timed(fn, x, y, args.epochs, dev, *extra)
            wall[name].append(n / w)
            cpu[name].append(n / c)
    ratio = [t / b for t, b in zip(wall["train"], wall["bare"])]
    ratio_cpu = [t / b for t, b in zip(cpu["train"], cpu["bare"])]
    steps = -(-args.samples // BATCH)
    counts = {}
    for name, (fn, extra) in runs.items():
        with count_ops() as c:
            fn(x, y, 1, dev, *extra)
        counts[name] = c
    per_step = {k: c.per_step(steps) for k, c in counts.items()}
    extra_ops = counts["train"].ops - counts["bare"].ops
    fewer_ops = counts["bare"].ops - counts["train"].ops
    print(f"train_loop: nn.Linear(784, 10), Adam, batch {BATCH}, {args.samples:,} samples × {args.epochs} epochs a run, "
          f"{dev}, {args.threads} torch thread(s){', progress bar on' if args.progress else ''}")
    print(f"  {'':6s} {'each run, wall (samples/s)':>44s} {'median':>8s}   {'CPU-time median':>15s}")
    for name in runs:
        print(f"  {name:6s} {' / '.join(f'{v:,.0f}' for v in wall[name]):>44s} {statistics.median(wall[name]):8,.0f}"
              f"   {statistics.median(cpu[name]):15,.0f}")
    print(f"  train ÷ bare, run by neighbouring run: {' / '.join(f'{r:.3f}' for r in ratio)}; "
          f"median {statistics.median(ratio):.3f} (CPU time: median {statistics.median(ratio_cpu):.3f})")
    for name in runs:
        ops, reads = per_step[name]
        print(f"  {name:6s} per step: {ops:.2f} torch operations, {reads:.3f} host reads "
              f"({dict(counts[name].reads)} in one epoch of {steps} steps)")
    print(f"  operations train issues beyond bare in one epoch: {dict(extra_ops) or 'none'}; "
          f"bare beyond train: {dict(fewer_ops) or 'none'}")
    print(json.dumps({"bench": "train_loop", "device": str(dev), "batch": BATCH, "samples": args.samples,
                      "epochs": args.epochs, "threads": args.threads, "progress": args.progress,
                      "bare": [round(v) for v in wall["bare"]], "train": [round(v) for v in wall["train"]],
                      "train_over_bare": [round(r, 3) for r in ratio],
                      "median": round(statistics.median(ratio), 3),
                      "median_cpu_time": round(statistics.median(ratio_cpu), 3),
                      "ops_per_step": {k: round(v[0], 3) for k, v in per_step.items()},
                      "reads_per_step": {k: round(v[1], 4) for k, v in per_step.items()},
                      "extra_ops_per_epoch": dict(extra_ops)}))


if __name__ == "__main__":
    main()
