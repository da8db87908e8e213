"""Per-step synchronous training vs local SGD vs speed-scaled local SGD, same samples (notebook 08).

On a two-node practice cluster (a desktop node and a *simulated* 2× slower mac node),
the parameter server trains the small CNN three times on the same data for about the
same number of samples: exchanging gradients every step (fp32); local SGD (H local
Adam steps, then one exchange of 16-bit weight deltas, batches ∝ speed); and
speed-scaled local SGD (equal batches, the mac takes H/slowdown steps per round).
Prints a table, then as the last line one JSON object:
{"bench": "local_sgd", "sync": {"samples_per_s", "bytes_per_sample", "accuracy", "seconds"},
 "local_sgd": {..., "H"}, "speed_scaled": {..., "H"}, "bytes_ratio": sync/local bytes per sample, ...}

Run: .venv/bin/python benchmarks/local_sgd.py [--steps 240] [--local-steps 8]
(HETLAB_QUICK=1 shrinks it.) Goal: ≥ 4× fewer bytes per sample within 1 accuracy point.
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from hetlab import is_quick  # noqa: E402
from hetlab.arithmetic.balance import scale_local_steps, split_batch  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.pair import the_pair  # noqa: E402
from hetlab.ps import ParameterServerTraining  # noqa: E402
from hetlab.ps.records import cluster_samples_per_s  # noqa: E402


def run_one(workers, train, test, mode, steps, batch_sizes, local_steps, transfer, seed):
    """Train one configuration from the same initial weights; return its measured figures."""
    with ParameterServerTraining(workers, train, mode=mode, local_steps=local_steps,
                                 transfer=transfer, seed=seed, batch_sizes=batch_sizes,
                                 progress=False) as run:
        t0 = time.perf_counter()  # the training's own time, not the actors' start-up
        records = run.run(steps)
        figures = {"samples_per_s": round(cluster_samples_per_s(records), 1),
                   "bytes_per_sample": round(run.bytes_per_sample, 1),
                   "accuracy": round(run.evaluate(test), 4),
                   "samples": run.samples_seen, "seconds": round(time.perf_counter() - t0, 1)}
    return figures


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80 if is_quick() else 400,
                        help="per-step sync steps; local SGD runs steps/H rounds of H steps")
    parser.add_argument("--local-steps", type=int, default=8, help="H (≥ 4)")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--slowdown", type=float, default=2.0, help="the practice mac's simulated slowdown")
    parser.add_argument("--train-samples", type=int, default=12000 if is_quick() else 60000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    h = args.local_steps
    rounds = max(1, args.steps // h)
    steps = rounds * h  # same samples in both runs
    train = load_mnist("train").subset(args.train_samples, seed=args.seed)
    test = load_mnist("test")
    with the_pair(practice_slowdown=args.slowdown) as pair:  # HETLAB_ADDRESS: your own pair
        workers = pair.workers
        if pair.real:  # each worker alone, a few steps
            with ParameterServerTraining(workers, train, progress=False) as probe:
                speeds = probe.standalone_samples_per_s(args.global_batch // 2, steps=5)
        else:  # the simulated slowdown is exact
            speeds = [args.slowdown, 1.0]
        sizes = split_batch(args.global_batch, speeds)  # ∝ speed: the mac is slower
        sync = run_one(workers, train, test, "sync", steps, sizes, h, "fp32", args.seed)
        local = run_one(workers, train, test, "local_sgd", rounds, sizes, h, "fp16", args.seed)
        equal = split_batch(args.global_batch, [1.0, 1.0])
        scaled_h = scale_local_steps(h, speeds)
        scaled_rounds = max(1, round(steps * args.global_batch / sum(a * b for a, b in zip(scaled_h, equal))))
        scaled = run_one(workers, train, test, "local_sgd", scaled_rounds, equal, scaled_h, "fp16", args.seed)
    local["H"], scaled["H"], scaled["batch_sizes"] = h, scaled_h, equal
    result = {"bench": "local_sgd", "sync": sync, "local_sgd": local, "speed_scaled": scaled,
              "bytes_ratio": round(sync["bytes_per_sample"] / local["bytes_per_sample"], 2),
              "accuracy_gap_points": round(100 * (sync["accuracy"] - local["accuracy"]), 2),
              "speed_ratio": round(local["samples_per_s"] / sync["samples_per_s"], 2),
              "scaled_vs_local_speed_ratio": round(scaled["samples_per_s"] / local["samples_per_s"], 2),
              "scaled_accuracy_gap_points": round(100 * (sync["accuracy"] - scaled["accuracy"]), 2),
              "workers": [w.label for w in workers], "batch_sizes": sizes,
              "global_batch": args.global_batch, "quick": is_quick()}
    print(f"{'':22} {'samples/s':>10} {'bytes/sample':>13} {'accuracy':>9} {'samples':>8} {'seconds':>8}")
    for name, r in (("sync", sync), (f"local H={h}, {sizes[0]}:{sizes[1]}", local),
                    (f"local H={scaled_h}, {equal[0]}:{equal[1]}", scaled)):
        print(f"{name:22} {r['samples_per_s']:>10.0f} {r['bytes_per_sample']:>13.1f} "
              f"{r['accuracy']:>9.4f} {r['samples']:>8} {r['seconds']:>8.1f}")
    print(f"workers: {', '.join(result['workers'])}; batch {sizes[0]}:{sizes[1]}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
