"""Does a hyperparameter search on the pair reach the sum of its machines? (notebook 09, issue 29)

The same Ray Tune search (``hetlab.search``: the same configurations, seeds and ASHA) runs
with the same time budget on the desktop alone, on the mac alone and on both, on the practice
cluster (two real Ray nodes on this machine; the "mac" is SIMULATED 4× slower: after each step
it sleeps 3× that step's typical compute time, ``hetlab.simulate``). With HETLAB_ADDRESS set,
your own pair instead (``hetlab.pair.the_pair``).

    throughput = samples trained by all trials ÷ the search's wall time
    pair_vs_sum = pair ÷ (desktop alone + mac alone),  pair_vs_desktop = pair ÷ desktop alone

Each search gets more configurations than it can finish, so every machine has work until the
budget ends; a fixed number of trials would instead end with the fast machine idle while the
slow one finishes its last trial. The three searches alternate ``desktop, mac, pair`` then
``pair, mac, desktop`` (``--repeats`` rounds of both orders), so that a machine whose speed drifts
(a shared box) hits all three alike; each figure is the mean over its runs. The load average
before and after is printed, for the record.

    .venv/bin/python benchmarks/pair_search.py [--budget 45] [--repeats 1] [--configs 200]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from hetlab import search
from hetlab.pair import the_pair
from hetlab.results import comparison_table

ROLES = {"desktop": ("desktop",), "mac": ("mac",), "pair": ("desktop", "mac")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=45.0, help="seconds per search (default 45)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of both orders (default 1)")
    parser.add_argument("--configs", type=int, default=200, help="configurations offered to each search (more than it finishes)")
    parser.add_argument("--train-samples", type=int, default=2000, help="samples a trial trains per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="most epochs per trial (ASHA's max_t)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs: dict = {name: [] for name in ROLES}
    with the_pair() as pair:
        print(pair)
        slowdowns = {w.role: w.slowdown for w in pair.workers}
        order = ["desktop", "mac", "pair", "pair", "mac", "desktop"] * args.repeats
        for name in order:
            t0 = time.perf_counter()
            result = search.search(None, args.configs, roles=ROLES[name], epochs=args.epochs, grace=1,
                                   train_samples=args.train_samples, val_samples=500, slowdowns=slowdowns,
                                   time_budget_s=args.budget, checkpoints=False, progress=False)
            runs[name].append(result)
            print(f"{name:8s} {result.samples_per_s:8,.0f} samples/s  {len(result.finished):3d} trials finished"
                  f"  {result.trials_per_hour:7,.0f} trials/hour  ({time.perf_counter() - t0:.0f} s)")
    mean = {name: statistics.mean(r.samples_per_s for r in results) for name, results in runs.items()}
    tph = {name: statistics.mean(r.trials_per_hour for r in results) for name, results in runs.items()}
    total = mean["desktop"] + mean["mac"]
    figures = {"desktop_samples_per_s": mean["desktop"], "mac_samples_per_s": mean["mac"],
               "sum_samples_per_s": total, "pair_samples_per_s": mean["pair"],
               "pair_vs_desktop": mean["pair"] / mean["desktop"], "pair_vs_sum": mean["pair"] / total,
               "best_possible_vs_desktop": total / mean["desktop"], "trials_per_hour": tph}
    print()
    print(comparison_table(figures))
    print(json.dumps({"pair_vs_sum": round(figures["pair_vs_sum"], 3),
                      "pair_vs_desktop": round(figures["pair_vs_desktop"], 3),
                      "sum_vs_desktop": round(figures["best_possible_vs_desktop"], 3),
                      "samples_per_s": {k: round(v) for k, v in mean.items()},
                      "trials_per_hour": {k: round(v) for k, v in tph.items()},
                      "budget_s": args.budget, "runs_each": 2 * args.repeats,
                      "mac": "simulated 4x slower" if pair.practice is not None else "real",
                      "load_avg_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)]}))


if __name__ == "__main__":
    main()
