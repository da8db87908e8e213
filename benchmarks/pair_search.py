"""Does a hyperparameter search on the pair reach the sum of its machines? (notebook 09, issue 35)

The same K configurations (``hetlab.search.driver``: the same seeds, ASHA off, every trial to its last
epoch) run on the desktop alone, on the mac alone and on both, each machine with its trials at once
(``hetlab.search.driver.plan``: the best single-machine search is the packed one). On the practice cluster (two real Ray nodes on this machine) the "mac" is SIMULATED
slower (``hetlab.core.simulate``); its measured slowdown, start-up and evaluation included, is printed.
With HETLAB_ADDRESS set, your own pair instead (``hetlab.pair.the_pair``).

    throughput = samples trained by all trials ÷ (the last trial's end − the first trial's start)
    pair_vs_sum = pair ÷ (desktop alone + mac alone),  pair_vs_desktop = pair ÷ desktop alone

Every search does the same work, so samples/s compare like with like. ``--rounds`` rounds, the
first a warm-up that is printed but not counted; the order alternates (desktop, mac, pair, then
pair, mac, desktop) so a drifting machine hits all three alike. Every round is printed, then the
median and the spread (lowest–highest) of the counted rounds. The load average before and after
is printed, for the record.

    .venv/bin/python benchmarks/pair_search.py [--rounds 3] [--configs 32] [--train-samples 1000]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

from hetlab import search
from hetlab.pair import the_pair

ROLES = {"desktop": ("desktop",), "mac": ("mac",), "pair": ("desktop", "mac")}


def slot_timeline(result) -> dict:
    """Where each machine's slots sat idle in one search (seconds of slot time, ``k`` slots a machine),
    and how fast its device trained (samples weighed by the width's cost, per second training): idle
    before its first trials started (``start``, from the search's first trial), between trials
    (``between``), after its last trials ended until the last trial anywhere ended (``end``); inside
    the trials, what was not training (``in_trials``: start-up, evaluation, reports; span − busy_s);
    and, for the whole search, Ray Tune's own tail after the last trial's last report (``tail``),
    which the search's samples/s counts too. Spans come from the search's own records."""
    spans = [(t.role, s[1], s[2], t) for t in result.trials for s in t.spans if t.role]
    first, last = min(s[1] for s in spans), max(s[2] for s in spans)
    out = {"tail": result.wall_s - last, "running": result.running_s}
    for role, k in result.packing.items():
        mine = [s for s in spans if s[0] == role]
        starts, ends = sorted(s[1] for s in mine)[:k], sorted((s[2] for s in mine), reverse=True)[:k]
        start = sum(t - first for t in starts) + (k - len(starts)) * (last - first)
        end = sum(last - t for t in ends)
        busy = sum(s[2] - s[1] for s in mine)
        trials = list({id(s[3]): s[3] for s in mine}.values())
        training = sum(t.busy_s for t in trials)
        work = sum(t.samples * t.config["width"] / 16 for t in trials)   # the CNN trains about in proportion to its width
        out[role] = {"k": k, "trials": len(trials), "start": start, "end": end,
                     "between": k * (last - first) - busy - start - end, "in_trials": busy - training,
                     "training": training, "work_per_s": work / training if training else 0.0}
    return out


def timeline_line(name: str, t: dict) -> str:
    parts = [f"{role} ×{v['k']}: {v['trials']} trials, training {v['training']:.1f} s "
             f"({v['work_per_s']:,.0f} width-16 samples/s), in trials not training "
             f"{v['in_trials']:.1f} s, idle at start {v['start']:.1f} s, between {v['between']:.1f} s, "
             f"at end {v['end']:.1f} s" for role, v in t.items() if isinstance(v, dict)]
    return f"    {name:8s} running {t['running']:.1f} s (Tune's tail after the last report {t['tail']:.1f} s); " \
           + "; ".join(parts)


def one_round(n: int, args, slowdowns: dict) -> dict:
    order = ["desktop", "mac", "pair"] if n % 2 == 0 else ["pair", "mac", "desktop"]
    rate, timeline = {}, {}
    for name in order:
        result = search.search(None, args.configs, roles=ROLES[name], epochs=args.epochs,
                               train_samples=args.train_samples, val_samples=500, slowdowns=slowdowns,
                               early_stopping=False, seed=args.seed)
        assert len(result.finished) == args.configs, result.summary()      # the same work in all three
        rate[name] = result.samples_per_s
        if name == "pair":
            packing = result.packing
        timeline[name] = slot_timeline(result)
    total = rate["desktop"] + rate["mac"]
    return {**rate, "sum": total, "packing": packing, "pair_vs_sum": rate["pair"] / total, "pair_vs_desktop": rate["pair"] / rate["desktop"],
            "mac_slowdown": rate["desktop"] / rate["mac"], "timeline": timeline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the first a warm-up (default 3, at least 3)")
    parser.add_argument("--configs", type=int, default=32,
                        help="configurations each search runs to the end (default 32: the end of a search "
                             "costs about one trial per machine, whatever their number)")
    parser.add_argument("--train-samples", type=int, default=1000, help="samples a trial trains per epoch")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of every trial")
    parser.add_argument("--seed", type=int, default=0, help="seed of the configurations")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the first is a warm-up, and a median needs two more")
    load_before = os.getloadavg()
    with the_pair() as pair:
        print(pair)
        slowdowns = {w.role: w.slowdown for w in pair.workers}
        print(f"{'round':8s}{'desktop':>10s}{'mac':>10s}{'sum':>10s}{'pair':>10s}{'pair/sum':>10s}"
              f"{'pair/desk':>10s}{'desk/mac':>11s}")
        rounds = []
        for n in range(args.rounds):
            r = one_round(n, args, slowdowns)
            rounds.append(r)
            print(f"{n + 1:<3d}{'(warm-up)' if n == 0 else '':5s}{r['desktop']:10,.0f}{r['mac']:10,.0f}{r['sum']:10,.0f}"
                  f"{r['pair']:10,.0f}{r['pair_vs_sum']:10.3f}{r['pair_vs_desktop']:10.3f}{r['mac_slowdown']:10.2f}×",
                  flush=True)
            for name, t in r["timeline"].items():
                print(timeline_line(name, t), flush=True)
    counted = rounds[1:]
    keys = ("desktop", "mac", "sum", "pair", "pair_vs_sum", "pair_vs_desktop", "mac_slowdown")
    median = {k: statistics.median(r[k] for r in counted) for k in keys}
    spread = {k: (min(r[k] for r in counted), max(r[k] for r in counted)) for k in keys}
    print(f"{'median':8s}{median['desktop']:10,.0f}{median['mac']:10,.0f}{median['sum']:10,.0f}{median['pair']:10,.0f}"
          f"{median['pair_vs_sum']:10.3f}{median['pair_vs_desktop']:10.3f}{median['mac_slowdown']:10.2f}×")
    print(f"spread: pair/sum {spread['pair_vs_sum'][0]:.3f}–{spread['pair_vs_sum'][1]:.3f}, pair/desktop "
          f"{spread['pair_vs_desktop'][0]:.3f}–{spread['pair_vs_desktop'][1]:.3f} over {len(counted)} counted rounds")
    print(json.dumps({"pair_vs_sum": round(median["pair_vs_sum"], 3),
                      "pair_vs_desktop": round(median["pair_vs_desktop"], 3),
                      "pair_vs_sum_rounds": [round(r["pair_vs_sum"], 3) for r in counted],
                      "warm_up_pair_vs_sum": round(rounds[0]["pair_vs_sum"], 3),
                      "samples_per_s": {k: round(median[k]) for k in ("desktop", "mac", "sum", "pair")},
                      "mac_measured_slowdown": round(median["mac_slowdown"], 2), "trials_at_once": rounds[-1]["packing"],
                      "configs": args.configs, "epochs": args.epochs, "train_samples": args.train_samples,
                      "rounds_counted": len(counted),
                      "mac": "simulated" if pair.practice is not None else "real",
                      "load_avg_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)]}))


if __name__ == "__main__":
    main()
