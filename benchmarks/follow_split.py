"""A fixed split against one that follows a throttled Mac, side by side (notebook 06, §5).

The pair (the practice cluster, mac simulated 4× slower; or your own at HETLAB_ADDRESS)
first tunes its split with ``balance.auto_tune``. Then the Mac is throttled: a *simulated*
further slowdown (``--throttle``, 2 = half its speed). From the tuned split, alternately:
``--steps`` steps at that fixed split, and ``--steps`` steps with a ``FollowSplit`` (the
split follows the measured speeds). The runs alternate ``--repeats`` times, so that load
from anything else on this machine hits both alike. Efficiency = samples/s ÷ Σ each
worker's standalone samples/s after the throttle, each worker timed alone before the runs and
after them (the mean of the two: this machine's speed drifts within a minute). Prints a
table, then as the last line one JSON object:
{"bench": "follow_split", "fixed": {...}, "follows": {...}, "speedup": follows/fixed, ...}

    .venv/bin/python benchmarks/follow_split.py [--global-batch 256] [--steps 12] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics

from hetlab.arithmetic import balance
from hetlab.core.data import load_mnist
from hetlab.pair import the_pair
from hetlab.ps import FollowSplit, ParameterServerTraining
from hetlab.ps.records import cluster_samples_per_s


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12, help="steps per run")
    parser.add_argument("--every", type=int, default=3, help="FollowSplit(every) of the following runs")
    parser.add_argument("--repeats", type=int, default=3, help="fixed/follows alternations")
    parser.add_argument("--throttle", type=float, default=2.0, help="the Mac's simulated extra slowdown")
    parser.add_argument("--slowdown", type=float, default=4.0, help="the practice mac's simulated slowdown")
    args = parser.parse_args(argv)
    g = args.global_batch
    with the_pair(practice_slowdown=args.slowdown) as pair, \
            ParameterServerTraining(pair.workers, load_mnist("train").subset(30_000, seed=0), seed=0,
                                    progress=False, batch_sizes=balance.split_batch(g, [1, 1])) as training:
        training.run(2)  # warm-up
        tuned = balance.auto_tune(lambda sizes: training.measure(sizes, steps=3), g, 2, rounds=4).batch_sizes
        cool = training.workers[1].slowdown
        training.set_slowdown("mac", cool * args.throttle)
        hot_labels = training.labels
        before = training.standalone_samples_per_s(g, steps=8)  # the hot Mac alone, and the desktop
        runs = {"fixed": [], "follows": []}
        splits, follow = [], FollowSplit(args.every)
        for _ in range(args.repeats):
            runs["fixed"].append(cluster_samples_per_s(training.run(args.steps, batch_sizes=tuned)))
            records = training.run(args.steps, batch_sizes=tuned, hooks=[follow])
            runs["follows"].append(cluster_samples_per_s(records))
            splits.append(list(training.batch_sizes))
        hot_standalone = [(b + a) / 2 for b, a in zip(before, training.standalone_samples_per_s(g, steps=8))]
    figures = {name: {"samples_per_s": round(statistics.median(rates), 1),
                      "efficiency": round(balance.efficiency(statistics.median(rates), hot_standalone), 3),
                      "runs": [round(r, 1) for r in rates]} for name, rates in runs.items()}
    result = {"bench": "follow_split", **figures,
              "speedup": round(figures["follows"]["samples_per_s"] / figures["fixed"]["samples_per_s"], 2),
              "tuned_split": tuned, "followed_splits": splits, "workers": hot_labels,
              "global_batch": g, "steps": args.steps, "retune_every": args.every}
    print(f"workers after the throttle: {'; '.join(hot_labels)}")
    print(f"{'split':>10} {'samples/s':>10} {'efficiency':>11}   runs")
    for name, f in figures.items():
        print(f"{name:>10} {f['samples_per_s']:10,.0f} {f['efficiency']:11.0%}   {f['runs']}")
    print(f"tuned split {balance.format_split(tuned)}; followed to {[balance.format_split(s) for s in splits]}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
