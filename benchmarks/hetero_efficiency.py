"""How much of two unlike workers does a parameter-server cluster use? (notebook 06)

Two workers on the practice cluster, the "mac" SIMULATED 4× slower (``hetlab.core.simulate``), or
your own pair with HETLAB_ADDRESS set. Three splits (equal, auto-tuned, and one that follows
the machine) run side by side in alternation, each worker alone before and after each:

    efficiency = cluster samples/s ÷ (Σ each worker's standalone samples/s)

then where a tuned step's milliseconds go and why it is longer than its ideal
(``harness.gpucheck.pair.step_budget``). Method and figures measured so far:
docs/measured/course-runs.md, "Benchmarks".

    .venv/bin/python benchmarks/hetero_efficiency.py [--global-batch 512] [--steps 8] [--run-steps 24] [--repeats 5]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository's root: harness/ is not installed

from hetlab.arithmetic import balance, steptime  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.pair import the_pair  # noqa: E402
from hetlab.ps import FollowSplit, ParameterServerTraining  # noqa: E402
from harness.gpucheck.pair import step_budget  # noqa: E402
from hetlab.ps.records import cluster_samples_per_s, wall_s  # noqa: E402


def ps_overhead_fraction(records) -> float:
    """Per step: the straggler's (least-waiting worker's) comm + server time over the step time."""
    fractions = []
    for step in sorted({r.step for r in records}):
        mine = [r for r in records if r.step == step]
        straggler = min(mine, key=lambda r: r.wait_s)
        if straggler.step_s > 0:
            fractions.append((straggler.comm_s + straggler.server_s) / straggler.step_s)
    return statistics.mean(fractions)


def critical_path_ms(records) -> dict:
    """Mean ms per step along the straggler's path: compute, simulated, comm, the server's
    update (its own arithmetic, then the rest of the driver's time for it: taking the gradients,
    putting the new weights in Ray's object store), and the rest of the step (the driver)."""
    parts = {"compute": [], "simulated": [], "comm": [], "server": [], "handover": [], "rest": [],
             "step": []}
    for step in sorted({r.step for r in records}):
        last = min((r for r in records if r.step == step), key=lambda r: r.wait_s)
        path = {"compute": last.compute_s, "simulated": last.simulated_s, "comm": last.comm_s,
                "server": last.server_s, "handover": last.update_s - last.server_s}
        path["rest"] = last.step_s - sum(path.values()) - last.wait_s
        path["step"] = last.step_s
        for k, v in path.items():
            parts[k].append(1e3 * v)
    return {k: statistics.mean(v) for k, v in parts.items()}


def split_in_hindsight(records) -> dict:
    """The best fixed split of two workers for these very steps, noise and all (an estimate): each
    step, each worker's messages plus its batch × its device's seconds per sample in that step; the
    split whose mean step (each step's slower worker) is least. Against the split the steps ran at,
    the same model gives what a better fixed split saves of "split off" + "noise" (the split's
    part); what is left of the noise is the box's. Assumes a device's time scales with its batch."""
    by_step: dict = {}
    for r in records:
        by_step.setdefault(r.step, []).append(r)
    steps = [rs for rs in by_step.values() if len(rs) == 2]
    total = steps[0][0].batch_size + steps[0][1].batch_size
    names = [r.worker for r in steps[0]]

    def mean_step(sizes) -> float:
        worst = 0.0
        for rs in steps:
            mine = {r.worker: r for r in rs}
            worst += max(mine[n].comm_s + b * mine[n].device_s / mine[n].batch_size for n, b in zip(names, sizes))
        return worst / len(steps)
    ran = [steps[0][0].batch_size, steps[0][1].batch_size]
    best = min(([b, total - b] for b in range(1, total)), key=mean_step)
    return {"ran": ran, "ran_ms": 1e3 * mean_step(ran), "best": best, "best_ms": 1e3 * mean_step(best)}


def by_position(records) -> list[float]:
    """Mean step ms by its place in its run (runs of consecutive step numbers): does a run's first
    step after a re-split cost more than the rest?"""
    steps = sorted({r.step: r.step_s for r in records}.items())
    runs, last = [], None
    for step, seconds in steps:
        if last is None or step != last + 1:
            runs.append([])
        runs[-1].append(seconds)
        last = step
    width = min(len(r) for r in runs)
    return [1e3 * statistics.mean(r[k] for r in runs) for k in range(width)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per standalone run and tuning round")
    parser.add_argument("--run-steps", type=int, default=24, help="measured steps per split in each alternation")
    parser.add_argument("--repeats", type=int, default=5, help="alternations (equal, tuned, followed, standalone)")
    parser.add_argument("--follow-every", type=int, default=8, help="the followed split's FollowSplit(every)")
    parser.add_argument("--slowdown", type=float, default=4.0, help="the practice mac's simulated slowdown")
    args = parser.parse_args()
    g = args.global_batch

    with the_pair(practice_slowdown=args.slowdown) as pair, \
            ParameterServerTraining(pair.workers, load_mnist("train"), seed=0, progress=False,
                                    batch_sizes=balance.split_batch(g, [1, 1])) as training:
        labels = training.labels
        training.run(3)  # warm-up
        tuned = balance.auto_tune(lambda sizes: training.measure(sizes, steps=args.steps), g, 2, rounds=6)
        equal = balance.split_batch(g, [1, 1])
        splits = {"equal": equal, "tuned": tuned.batch_sizes, "followed": list(tuned.batch_sizes)}
        followed_at, follow = [], FollowSplit(args.follow_every)  # the followed split at each alternation's end
        runs = {name: [] for name in splits}
        driver_cpu = dict.fromkeys(splits, 0.0)
        alone_each, eff_each = [], {name: [] for name in splits}
        alone_at = tuned.batch_sizes  # each worker alone at its own share (docstring)
        alone_each.append(training.standalone_samples_per_s(alone_at, steps=args.steps))
        for _ in range(args.repeats):  # each alternation: the three splits, then both alone again
            rates = {}
            for name, sizes in splits.items():
                cpu, start = time.process_time(), time.perf_counter()
                recs = training.run(args.run_steps, batch_sizes=sizes,
                                    hooks=[follow] if name == "followed" else [])
                rates[name] = sum(r.samples for r in recs) / (time.perf_counter() - start)  # warm-ups included
                driver_cpu[name] += time.process_time() - cpu
                runs[name].extend(recs)
            splits["followed"] = list(training.batch_sizes)
            followed_at.append(splits["followed"])
            alone_each.append(training.standalone_samples_per_s(alone_at, steps=args.steps))
            bracket = [statistics.mean(pair) for pair in zip(*alone_each[-2:])]  # before and after
            for name, rate in rates.items():
                eff_each[name].append(balance.efficiency(rate, bracket))
        moves = [e for e in training.events if e.what == "resplit" and e.why == "follow"]

    alone = [statistics.mean(a) for a in zip(*alone_each)]
    rate = {name: cluster_samples_per_s(recs) for name, recs in runs.items()}
    eff = {name: statistics.median(e) for name, e in eff_each.items()}
    overhead = {name: ps_overhead_fraction(recs) for name, recs in runs.items()}

    print(f"hetero_efficiency: global batch {g}, {args.run_steps} steps × {args.repeats} alternations per split "
          f"({args.steps} per standalone run and tuning round)")
    for label, b, each in zip(labels, alone_at, zip(*alone_each)):
        print(f"  alone at {b:3d} {label:45s} {' / '.join(f'{a:,.0f}' for a in each)} samples/s "
              f"(before and after each alternation)")
    print(f"  sum of standalone (mean): {sum(alone):,.0f} samples/s")
    print("  auto-tune rounds:")
    for r in tuned.history:
        print(f"    {balance.format_split(r.batch_sizes):24s} measured "
              f"{', '.join(f'{t:,.0f}' for t in r.samples_per_s)} samples/s")
    equal_finish = balance.equal_finish_split(g, tuned.lines)
    print(f"  auto-tune's lines finish together at {balance.format_split(equal_finish)}; it took "
          f"{balance.format_split(tuned.batch_sizes)}")
    print(f"  {'split':28s} {'samples/s':>10} {'efficiency':>11} {'PS overhead':>12}   efficiency per alternation")
    for name, sizes in splits.items():
        print(f"  {name + ' ' + balance.format_split(sizes):28s} {rate[name]:10,.0f} "
              f"{eff[name]:11.1%} {overhead[name]:12.1%}   {', '.join(f'{e:.1%}' for e in eff_each[name])}")
    print("  where a tuned step's time goes (mean per step):")
    tuned_recs = runs["tuned"]
    n_steps = len({r.step for r in tuned_recs})
    step_s = wall_s(tuned_recs) / n_steps
    server_s = sum({r.step: r.server_s for r in tuned_recs}.values()) / n_steps
    update_s = sum({r.step: r.update_s for r in tuned_recs}.values()) / n_steps
    for spec, label in zip(training.workers, labels):
        mine = [r for r in tuned_recs if r.worker == spec.name]
        mean = lambda field: sum(getattr(r, field) for r in mine) / len(mine)  # noqa: E731
        print(f"    {label:45s} compute {mean('compute_s')*1e3:6.1f} ms  simulated {mean('simulated_s')*1e3:6.1f} ms"
              f"  comm {mean('comm_s')*1e3:5.1f} ms  wait {mean('wait_s')*1e3:5.1f} ms")
    print(f"    step {step_s*1e3:.1f} ms, of which the update {update_s*1e3:.1f} ms (the server's own "
          f"arithmetic {server_s*1e3:.1f} ms, in the driver; the rest is taking the gradients and "
          f"handing out the weights)")
    path = critical_path_ms(tuned_recs)
    driver_ms = 1e3 * driver_cpu["tuned"] / n_steps
    print("  where each ms of a tuned step goes, along the straggler's path (mean ms per step):")
    print("    " + "  ".join(f"{k} {v:.1f}" for k, v in path.items() if k != "step")
          + f"  = step {path['step']:.1f} ms")
    print(f"    driver CPU {driver_ms:.1f} ms per step (its Python + Ray's threads in the driver; "
          f"while a step runs, it takes CPU from the workers)")
    predicted = steptime.predicted_efficiency([steptime.constant_speed(a) for a in alone], tuned.batch_sizes)
    print(f"  predicted efficiency of the tuned split from standalone speeds alone: {predicted:.1%} "
          f"(the gap to measured = workers slower together than alone + PS overhead)")
    budget = step_budget(tuned_recs)
    devices = [budget.speeds[spec.name] for spec in training.workers]
    kept = rate["tuned"] / sum(devices)
    print(f"  the devices' own speeds in the tuned steps (compute + simulated): "
          f"{' + '.join(f'{d:,.0f}' for d in devices)} = {sum(devices):,.0f} samples/s; the cluster "
          f"kept {kept:.1%} of that (the rest: communication, the update, waiting)")
    hindsight = balance.equal_finish_split(g, [steptime.constant_speed(d).plus(budget.comm[spec.name])
                                               for d, spec in zip(devices, training.workers)])
    print(f"  why the tuned step is longer than its ideal (the batch ÷ those speeds), mean per step:\n    {budget}"
          f"\n    (the split balanced for those speeds and messages: {balance.format_split(hindsight)}; "
          f"tuned {balance.format_split(tuned.batch_sizes)})")
    ceiling = budget.ideal / (budget.ideal + budget.overhead)
    print(f"  with a split balanced in every step and no noise, the parameter server's own cost alone would "
          f"still cap the cluster at {ceiling:.1%} of those speeds")
    hind = split_in_hindsight(tuned_recs)
    print(f"  the best fixed split for the tuned steps themselves, noise and all (each step's speeds; an estimate): "
          f"{balance.format_split(hind['best'])}, mean step {hind['best_ms']:.1f} ms against "
          f"{hind['ran_ms']:.1f} ms at {balance.format_split(hind['ran']).split(' ')[0]}: the split's part of "
          f"split off + noise is {hind['ran_ms'] - hind['best_ms']:.1f} ms; the rest of the noise is the box's")
    place = by_position(tuned_recs)
    rest = statistics.mean(place[2:] or place)
    print(f"  tuned steps by their place in a run (mean ms): "
          f"{', '.join(f'{x:.1f}' for x in place[:2])}, then {rest:.1f} (the rest)")
    followed = step_budget(runs["followed"])
    print(f"  the followed split (FollowSplit({args.follow_every}), from the tuned one): moved {len(moves)}× "
          f"({' → '.join(balance.format_split(m.after).split(' ')[0] for m in moves) or 'never'}); its steps:"
          f"\n    {followed}")
    print(json.dumps({"bench": "hetero_efficiency", "efficiency_equal": round(eff["equal"], 4),
                      "efficiency_tuned": round(eff["tuned"], 4),
                      "efficiency_tuned_each": [round(e, 4) for e in eff_each["tuned"]],
                      "tuned_shares": [round(b / sum(tuned.batch_sizes), 4) for b in tuned.batch_sizes],
                      "tuned_batch_sizes": tuned.batch_sizes, "tuned_equal_finish": equal_finish,
                      "ps_overhead_fraction": round(overhead["tuned"], 4),
                      "ps_overhead_fraction_equal": round(overhead["equal"], 4),
                      "efficiency_tuned_predicted": round(predicted, 4),
                      "tuned_vs_devices_in_cluster": round(kept, 4),
                      "tuned_step_ms": {k: round(v, 2) for k, v in path.items()},
                      "tuned_step_budget_ms": budget.ms(),
                      "tuned_split_in_hindsight": hindsight,
                      "tuned_split_in_hindsight_per_step": hind["best"],
                      "tuned_split_part_ms": round(hind["ran_ms"] - hind["best_ms"], 2),
                      "tuned_step_ms_by_place": [round(x, 1) for x in place[:2]] + [round(rest, 1)],
                      "tuned_ceiling_from_own_cost": round(ceiling, 4),
                      "efficiency_followed": round(eff["followed"], 4),
                      "efficiency_followed_each": [round(e, 4) for e in eff_each["followed"]],
                      "followed_batch_sizes": followed_at, "followed_moves": len(moves),
                      "followed_step_budget_ms": followed.ms(),
                      "driver_cpu_ms_per_step": round(driver_ms, 2),
                      "standalone_batch_sizes": alone_at, "global_batch": g, "run_steps": args.run_steps, "simulated_slowdown": args.slowdown}))


if __name__ == "__main__":
    main()
