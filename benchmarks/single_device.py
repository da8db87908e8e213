"""hetlab's tensor input pipeline against the textbook per-sample DataLoader, side by side.

Same model, same samples, same process, one run; the two pipelines alternate
(``--repeats`` rounds, best round of each kept), so drift on a shared machine hits
both alike. Measures (a) the input pipeline alone: shuffled batches ready on the
device; (b) the whole training loop: the pipeline feeding Adam steps of the small CNN.
The last line printed is one JSON object.

    python benchmarks/single_device.py [--samples 12000] [--batch-size 64] [--device auto]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from hetlab.core.data import batches, load_mnist
from hetlab.core.devices import resolve, synchronize
from hetlab.core.models import make_model
from hetlab.core.train import train_step
from hetlab.core.data import textbook_loader


def hetlab_batches(data, batch_size, dev, seed):
    """Normalise the whole set once, move it to the device once, slice batches there."""
    x, y = data.normalized().to(dev), data.labels.to(dev)
    yield from batches(x, y, batch_size, shuffle=True, seed=seed)


def textbook_batches(data, batch_size, dev, seed):
    """Per-sample PIL -> tensor -> normalise, collated by a DataLoader, then copied to the device."""
    for xb, yb in textbook_loader(data, batch_size, shuffle=True, seed=seed):
        yield xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)


def time_pipeline(make_batches, data, batch_size, dev) -> float:
    """Samples per second of producing device-ready batches, nothing else."""
    synchronize(dev)
    t0 = time.perf_counter()
    n = 0
    for xb, yb in make_batches(data, batch_size, dev, seed=0):
        n += len(yb)
    synchronize(dev)
    return n / (time.perf_counter() - t0)


def time_training(make_batches, data, batch_size, dev) -> float:
    """Samples per second of a full training epoch fed by ``make_batches``."""
    torch.manual_seed(0)
    model = make_model("small", seed=0).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    synchronize(dev)
    t0 = time.perf_counter()
    n = 0
    for xb, yb in make_batches(data, batch_size, dev, seed=0):
        train_step(model, opt, nn.functional.cross_entropy, xb, yb)
        n += len(yb)
    synchronize(dev)
    return n / (time.perf_counter() - t0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=12000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    dev = resolve(args.device)
    data = load_mnist("train").subset(args.samples)
    pipes = {"hetlab": hetlab_batches, "dataloader": textbook_batches}
    best = {(kind, name): 0.0 for kind in ("pipeline", "train") for name in pipes}
    time_training(hetlab_batches, data.subset(1024), args.batch_size, dev)  # warm-up
    for r in range(args.repeats):
        for name, fn in (pipes.items() if r % 2 == 0 else reversed(pipes.items())):
            best["pipeline", name] = max(best["pipeline", name], time_pipeline(fn, data, args.batch_size, dev))
            best["train", name] = max(best["train", name], time_training(fn, data, args.batch_size, dev))

    print(f"device {dev}, {args.samples} samples, batch {args.batch_size}, best of {args.repeats}")
    print(f"{'samples/s':<22}{'hetlab':>12}{'dataloader':>12}{'ratio':>8}")
    for kind in ("pipeline", "train"):
        h, d = best[kind, "hetlab"], best[kind, "dataloader"]
        print(f"{kind:<22}{h:>12,.0f}{d:>12,.0f}{h / d:>8.2f}")
    result = {
        "bench": "single_device",
        "device": str(dev),
        "pipeline_speedup": round(best["pipeline", "hetlab"] / best["pipeline", "dataloader"], 2),
        "train_speedup": round(best["train", "hetlab"] / best["train", "dataloader"], 2),
        "samples_per_s_hetlab": round(best["train", "hetlab"]),
        "samples_per_s_dataloader": round(best["train", "dataloader"]),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
