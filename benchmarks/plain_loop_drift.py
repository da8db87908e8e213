"""Does running the pair leave the desktop's own loop slower? (issue 50: one "desktop alone")

The plain loop at one batch (``train.measure_speed``: 3 windows of ``--steps`` steps each) in one
process: fresh, with the practice cluster up, and after each of ``--runs`` parameter-server runs, at once
and ``--pause`` seconds later. If the figures after the runs sit within the spread of those before them,
the pair's runs leave nothing behind, and a drift seen in ``pair_vs_alone`` is the machine's own.

    .venv/bin/python benchmarks/plain_loop_drift.py [--batch 128] [--steps 30] [--runs 3]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

from hetlab.core.train import measure_speed  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.core.models import make_model  # noqa: E402
from hetlab.pair import the_pair  # noqa: E402
from hetlab.ps import ParameterServerTraining  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pause", type=float, default=3.0)
    args = parser.parse_args()
    model, figures = make_model("small"), {}

    def measure(when: str) -> None:
        speed = measure_speed(model, "cpu", args.batch, steps=3 * args.steps, warmup=2)
        figures[when] = [round(x) for x in speed.windows]
        print(f"  {when:<22} {' / '.join(f'{x:,}' for x in figures[when])} samples/s "
              f"(torch threads {torch.get_num_threads()})", flush=True)

    measure("fresh")
    data = load_mnist("train").subset(4096, seed=0)
    with the_pair() as pair:
        measure("Ray up")
        for k in range(args.runs):
            with ParameterServerTraining(pair.workers, data, batch_sizes=[args.batch - 20, 20], seed=0,
                                         progress=False) as run:
                run.run(30)
            measure(f"after pair run {k + 1}")
            time.sleep(args.pause)
            measure(f"  {args.pause:g} s later")
    before = figures["fresh"] + figures["Ray up"]
    after = [x for when, xs in figures.items() if when not in ("fresh", "Ray up") for x in xs]
    print(json.dumps({"bench": "plain_loop_drift", "batch": args.batch, "figures": figures,
                      "before": [min(before), max(before)], "after": [min(after), max(after)],
                      "after_within_before": min(after) >= min(before) and max(after) <= max(before)}))


if __name__ == "__main__":
    main()
