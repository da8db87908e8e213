"""Is local SGD's inner loop as fast as the plain loop? One worker, one device, side by side (notebook 08).

Local SGD pays for its exchange once per H steps, so between exchanges a worker should train as
fast as ``hetlab.core.train.train`` at the same batch on the same device. This times both, alternated:

* ``train``: the plain loop in this process, on the best device here: its steady speed (``History.steady``,
  its first 5 steps, the warm-up, apart and their seconds printed beside it);
* ``local SGD``: one ``Worker`` on a one-node practice cluster, ``mode="local_sgd"`` rounds of H
  steps; its loop alone (samples ÷ the worker's own compute time) and end to end (samples ÷ the
  rounds' wall time: the exchange and the server's outer step included).

    .venv/bin/python benchmarks/local_loop.py [--batch 128] [--local-steps 64] [--repeats 5]

Goal: local SGD end to end ≥ 0.95× train. The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from hetlab.arithmetic.steady import WARMUP_STEPS  # noqa: E402
from hetlab.core import devices  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.core.models import make_model  # noqa: E402
from hetlab.cluster.practice import PracticeCluster  # noqa: E402
from hetlab.ps import ParameterServerTraining, WorkerSpec  # noqa: E402
from hetlab.ps.records import cluster_samples_per_s  # noqa: E402
from hetlab.core.train import train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--local-steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4, help="local-SGD rounds per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stand-in", action="store_true",
                        help="no GPU: Ray counts one on the node, the worker asks for it and runs on the CPU "
                             "(the GPU call's dry run)")
    args = parser.parse_args()
    b, h = args.batch, args.local_steps
    device = devices.best()
    data = load_mnist("train").subset(b * h * args.rounds, seed=0)
    plain, loop, whole, warmups = [], [], [], []
    # A worker on a card asks Ray for the GPU, so the node must count it ("auto": the node's best device)
    gpu = device == "cuda" or args.stand_in
    with PracticeCluster(("desktop",), accounted_gpus={"desktop": 1} if gpu else None), \
            ParameterServerTraining([WorkerSpec("desktop", role="desktop", device="auto" if gpu else device)], data,
                                    batch_sizes=[b], mode="local_sgd", local_steps=h, seed=0,
                                    progress=False) as run:
        t0 = time.perf_counter()
        run.run(1)   # warm-up: timed apart
        round_warmup = time.perf_counter() - t0
        for _ in range(args.repeats):
            warm = train(make_model("small"), data, epochs=1, batch_size=b, device=device, progress=False).steady
            plain.append(warm.samples_per_s)
            warmups.append(warm.warmup_s)
            records = run.run(args.rounds)
            loop.append(sum(r.samples for r in records) / sum(r.compute_s for r in records))
            whole.append(cluster_samples_per_s(records))
    med = {k: statistics.median(v) for k, v in (("train", plain), ("loop", loop), ("whole", whole))}
    pairs = [w / p for w, p in zip(whole, plain)]   # each alternation's own ratio: load hits both alike
    where = f"STAND-IN (Ray counts a GPU, the worker runs on {device})" if args.stand_in else device
    print(f"local_loop: batch {b}, H={h}, {args.rounds} rounds ({len(data):,} samples) per run, {where}")
    print(f"  {'':28s} {'each run (samples/s)':>30s} {'median':>9s} {'÷ train':>8s}")
    for name, values, key in (("train (plain loop)", plain, "train"), ("local SGD, its loop alone", loop, "loop"),
                              ("local SGD, end to end", whole, "whole")):
        print(f"  {name:28s} {' / '.join(f'{v:,.0f}' for v in values):>30s} {med[key]:9,.0f} "
              f"{med[key] / med['train']:8.3f}")
    print(f"  warm-up apart: train's first {WARMUP_STEPS} steps {' / '.join(f'{w:.3f}' for w in warmups)} s a run; "
          f"local SGD's first round {round_warmup:.3f} s")
    print(f"  end to end ÷ train, alternation by alternation: {' / '.join(f'{r:.3f}' for r in pairs)}; "
          f"median {statistics.median(pairs):.3f}")
    print(json.dumps({"bench": "local_loop", "device": str(device), "stand_in": args.stand_in, "batch": b, "local_steps": h,
                      "train": [round(v) for v in plain], "loop": [round(v) for v in loop],
                      "end_to_end": [round(v) for v in whole],
                      "loop_over_train": round(med["loop"] / med["train"], 3),
                      "end_to_end_over_train": round(med["whole"] / med["train"], 3),
                      "end_to_end_over_train_each": [round(r, 3) for r in pairs],
                      "end_to_end_over_train_median_of_pairs": round(statistics.median(pairs), 3),
                      "train_warmup_steps": WARMUP_STEPS, "train_warmup_s": [round(w, 4) for w in warmups],
                      "local_sgd_warmup_round_s": round(round_warmup, 4)}))


if __name__ == "__main__":
    main()
