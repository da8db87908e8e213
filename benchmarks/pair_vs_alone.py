"""Does the pair beat the desktop alone, as the planner predicts? Every plan run, predicted beside measured.

The planner (``hetlab.arithmetic.planner``, notebooks 02 and 08) predicts each plan's samples/s from three
measured inputs, all taken here first, apart from the timed runs:

* each device's step time t(b) = fixed + b × per-sample, fitted to a batch sweep
  (``hetlab.arithmetic.steptime``): the desktop's plain loop in this process (what ``hetlab.core.train`` runs),
  and each worker where it runs (``standalone_samples_per_s``: its threads, its node, the simulated
  slowdown of a practice Mac; the workers one after another);
* the engine's own cost per exchange: sync steps of 1 + 1 samples (``records.engine_cost``);
* the link (``--link-mbit``; the practice cluster has none).

Then it runs, on the same samples (a fixed subset, ``--epochs`` passes, both rounded up by ``equal_work``
so that every plan trains as many samples, with at least 3 timed rounds at every H): the desktop alone with
``hetlab.core.train``; per-step sync; local SGD at the planner's H (the fastest local plan with the
Mac kept in); and the plan the planner picks. Repeated ``--repeats`` times, alternating; every
run printed, with the median. Time to the target accuracy = samples until the test accuracy first
reached ``--target`` (evaluated after each pass) ÷ the run's samples/s.

    .venv/bin/python benchmarks/pair_vs_alone.py [--global-batch 128] [--repeats 3]

On the practice cluster the Mac is SIMULATED (``--slowdown``× slower, hetlab.core.simulate) and both
workers share this machine's cores. ``--card``: a GPU machine (docs/gpu-machine.md) as a real
unlike pair, its card the desktop and its CPU the Mac, nothing simulated (the CPU worker gets half
the cores, so the card's launching thread keeps one). With HETLAB_ADDRESS set it runs on that
cluster: your pair, or the rehearsal (``--rehearsal`` builds it and caps its link).
The last line printed is one JSON object with ``measured_over_predicted`` per plan (goal: 0.8–1.2) and
whether the pick was borne out both ways (``borne_out``). ``--card --stand-in``: the GPU call's dry run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository's root: harness/ is not installed

from hetlab.core import devices  # noqa: E402
from hetlab.core.train import measure_speed  # noqa: E402
from hetlab.arithmetic import planner, steptime  # noqa: E402
from hetlab.arithmetic import steady  # noqa: E402
from hetlab.arithmetic.steady import WARMUP_STEPS  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.core.models import count_params, make_model  # noqa: E402
from hetlab.ps import ParameterServerTraining  # noqa: E402
from hetlab.ps.records import cluster_samples_per_s, engine_cost  # noqa: E402
from hetlab.core.train import train  # noqa: E402

SWEEP = (16, 64, 128, 256)
LOCAL_STEPS = (4, 8, 16, 32, 64)   # the H the planner weighs (planner.advise)
MIN_ROUNDS = 3                     # local SGD's rounds at every H, at least: one round is no measurement


def sweep_sizes(global_batch: int) -> tuple[int, ...]:
    """The sweep's batch sizes, up to the largest share any plan gives (the desktop alone: the whole
    global batch), so that no plan's prediction extrapolates the fitted line."""
    return tuple(sorted({b for b in SWEEP if b < global_batch} | {global_batch}))


def local_steps_for(global_batch: int, available: int, wanted=LOCAL_STEPS) -> tuple[int, ...]:
    """The H weighed at this batch: those whose round fits in the data (H·B ≤ ``available``)."""
    hs = tuple(h for h in wanted if h * global_batch <= available)
    if not hs:
        raise SystemExit(f"pair_vs_alone: a round of H={min(wanted)} at batch {global_batch:,} needs more "
                         f"than the {available:,} samples there are: a smaller --global-batch.")
    return hs


def equal_work(samples: int, epochs: int, global_batch: int, available: int,
               local_steps=LOCAL_STEPS, rounds: int = MIN_ROUNDS + 1) -> tuple[int, int]:
    """(subset size, passes) so that every plan trains the same samples: the subset a whole number of
    rounds at the largest H (hence at every H of the list and at every step), and the passes enough
    for ``rounds`` rounds at that H (the first a warm-up, untimed). Within ``available`` samples."""
    unit = max(local_steps) * global_batch
    size = min(max(unit, -(-samples // unit) * unit), available // unit * unit)
    return size, max(epochs, -(-rounds * unit // size))


def borne_out(pick: str, over_alone: dict, to_target: dict, min_gain: float) -> tuple[bool, str | None]:
    """Was the planner's pick right both ways? A pair plan picked must beat the desktop alone in the runs
    (speed and time to target); the desktop alone picked, no pair plan may have gained ``min_gain``
    (a missed gain). Returns (borne out, the plan it missed or got wrong, if any)."""
    if pick != "desktop alone":
        ok = over_alone[pick] >= 1 and to_target[pick] <= to_target["desktop alone"]
        return ok, None if ok else pick
    missed = [name for name, r in over_alone.items() if name != pick and r >= min_gain]
    return not missed, (max(missed, key=over_alone.get) if missed else None)


def fit_plain_loop(sizes, steps: int, rounds: int = 3) -> tuple[steptime.StepTime, dict]:
    """The desktop's plain loop here: notebook 02's sweep (steady: warm-up apart), fitted; and each batch
    size's steady measurement (samples/s, warm-up seconds) beside the line. The sizes take turns, one
    window each per round, ``rounds`` rounds, and each size runs as many samples a window as the largest
    (``steps`` of it): a moment of load or a slow start then weighs on every size alike, and each point is
    the median of its rounds instead of a few milliseconds' windows at the small batches."""
    model, device = make_model("small"), devices.best()
    windows = {b: [] for b in sizes}
    for r in range(rounds):
        for b in sizes:
            windows[b].append(measure_speed(
                model, device, b, steps=max(steps, steps * max(sizes) // b), windows=1,
                warmup=WARMUP_STEPS if r == 0 else 0))
    speeds = {b: joined(ws) for b, ws in windows.items()}
    line = steptime.from_sweep(sizes, [speeds[b].samples_per_s for b in sizes], f"the plain loop on {device} here")
    return line, speeds


def joined(turns: list[steady.SteadySpeed]) -> steady.SteadySpeed:
    """One steady speed from a size's turns: each turn's windows become this one's, their median the
    speed, the warm-ups summed apart."""
    rates = tuple(w for t in turns for w in t.windows)
    return steady.SteadySpeed(statistics.median(rates), min(rates), max(rates), rates, sum(t.steps for t in turns),
                              sum(t.warmup_steps for t in turns), sum(t.warmup_s for t in turns))


def fit_workers(training, sizes, steps: int) -> list[steptime.StepTime]:
    """Each worker where it runs, training on its own (one after the other), swept and fitted."""
    rates = [training.standalone_samples_per_s(b, steps=steps) for b in sizes]
    return [steptime.from_sweep(sizes, [r[i] for r in rates], f"{label}, where it runs")
            for i, label in enumerate(training.labels)]


def accuracy_curve(points, target: float):
    """Samples until the accuracy first reached ``target`` (None if never) from (samples, accuracy)."""
    return next((s for s, a in points if a >= target), None)


def run_alone(data, test, batch: int, epochs: int, target: float, sweep_steps: int) -> dict:
    """The desktop alone: ``train`` (its steady speed, the warm-up apart), and just before it the sweep's
    measurement at the same batch (the plain loop on one fixed random batch): the two meanings of "alone"
    side by side, at the same moment, so that a busy machine weighs on both alike."""
    point = measure_speed(make_model("small"), devices.best(), batch, steps=sweep_steps,
                                      warmup=WARMUP_STEPS)
    hist = train(make_model("small"), data, test, epochs=epochs, batch_size=batch, device=devices.best(), progress=False)
    warm = hist.steady
    per_epoch = len(data)
    points = [((i + 1) * per_epoch, a) for i, a in enumerate(hist.test_accuracy)]
    return {"samples_per_s": warm.samples_per_s, "to_target": accuracy_curve(points, target),
            "accuracy": hist.final_accuracy, "steady": warm.as_dict(), "whole_run": hist.samples_per_s,
            "evaluation_s": hist.seconds_eval, "sweep_point": point.as_dict()}


def run_pair(workers, plan: planner.Plan, data, test, epochs: int, target: float) -> dict:
    """One plan on the parameter server, from fresh weights: ``epochs`` passes over ``data``."""
    h, sizes = plan.local_steps, list(plan.batch_sizes)
    kw = {"mode": "local_sgd", "local_steps": h, "transfer": "fp16"} if h > 1 else {"mode": "sync"}
    per_pass = -(-len(data) // (h * sum(sizes)))
    points, records = [], []
    with ParameterServerTraining(workers, data, batch_sizes=sizes, seed=0, progress=False, **kw) as run:
        t0 = time.perf_counter()
        run.run(1)   # warm-up (each worker's first step at its size): timed apart, its samples count
        warmup_s = time.perf_counter() - t0
        for epoch in range(epochs):   # evaluated at the same sample counts as the desktop alone
            records += run.run(per_pass - (epoch == 0))
            points.append((run.samples_seen, run.evaluate(test)))
    return {"samples_per_s": cluster_samples_per_s(records), "to_target": accuracy_curve(points, target),
            "accuracy": points[-1][1], "warmup_s": warmup_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=16_384, help="the training subset, one pass")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.95, help="test accuracy to reach")
    parser.add_argument("--slowdown", type=float, default=4.0, help="the practice Mac's simulated slowdown")
    parser.add_argument("--link-mbit", type=float, default=None, help="the link's cap (default: none)")
    parser.add_argument("--sweep-steps", type=int, default=20, help="timed steps per batch size of each sweep")
    parser.add_argument("--card", action="store_true", help="a GPU machine: its card + its CPU, nothing simulated")
    parser.add_argument("--stand-in", action="store_true",
                        help="with --card, no GPU: Ray counts one on the desktop node, its worker runs on the CPU "
                             "(the GPU call's dry run; every label says stand-in)")
    parser.add_argument("--local-steps", default=",".join(map(str, LOCAL_STEPS)),
                        help="the H to weigh, comma-separated (default %(default)s)")
    parser.add_argument("--rehearsal", choices=("wifi", "gigabit"), default=None,
                        help="build the two-host rehearsal with this link cap and run there (root)")
    args = parser.parse_args()
    if args.stand_in and not args.card:
        raise SystemExit("pair_vs_alone: --stand-in stands in for --card: give both.")
    if args.rehearsal:
        return in_rehearsal(args)

    b = args.global_batch
    full = load_mnist("train")
    hs = local_steps_for(b, len(full), tuple(int(h) for h in args.local_steps.split(",")))
    size, args.epochs = equal_work(args.samples, args.epochs, b, len(full), hs)
    args.samples_used = size
    data = full.subset(size, seed=0)
    test = load_mnist("test").subset(2_000, seed=0)
    params = count_params(make_model("small"))
    link = (planner.SAME_MACHINE if args.link_mbit is None
            else planner.Link(args.link_mbit, 0.0, f"a {args.link_mbit:g} Mbit/s cap, no latency"))
    started = time.perf_counter()
    # the plain loop's sweep, twice: first in a fresh process before Ray starts (kept only to show what it
    # measures: the process's own warm-up, and the machine before Ray), then the planner's line, after the
    # pair's probe, in the conditions of the timed runs (Ray's processes up, this process warm)
    first_line, first_points = fit_plain_loop(sweep_sizes(b), args.sweep_steps)
    with the_pair(args) as pair:
        with ParameterServerTraining(pair.workers, data, batch_sizes=[b // 2, b - b // 2], seed=0,
                                     progress=False) as probe:
            probe.run(4)                                   # warm-up: the workers' first steps
            lines = fit_workers(probe, sweep_sizes(b), args.sweep_steps)
            probe.run(2, batch_sizes=[1, 1])
            engine = engine_cost(probe.run(12, batch_sizes=[1, 1]))
            labels = probe.labels
        alone_line, alone_points = fit_plain_loop(sweep_sizes(b), args.sweep_steps)
        # "desktop alone" is the plain loop; the pair's plans use each worker as it runs in the pair
        pair_lines = (lines[0], lines[1])
        advice = planner.advise(pair_lines, params, link, b, hs, engine_s=engine, alone=alone_line)
        alone_plan = advice.plans[0]   # the plain loop
        sync = planner.with_mac(pair_lines, params, link, b, 1, 4, engine, keep_mac=True)
        local = max((planner.with_mac(pair_lines, params, link, b, h, 2, engine, keep_mac=True)
                     for h in hs), key=lambda p: p.samples_per_s)
        plans = {"desktop alone": alone_plan, "sync per step": sync, f"local SGD H={local.local_steps}": local}
        if advice.best.uses_mac:
            plans[f"planner's pick: {advice.best.name}"] = advice.best
        runs = {name: [] for name in plans}
        for _ in range(args.repeats):
            for name, plan in plans.items():
                runs[name].append(run_alone(data, test, b, args.epochs, args.target, args.sweep_steps)
                                  if not plan.uses_mac
                                  else run_pair(pair.workers, plan, data, test, args.epochs, args.target))
        where = ("STAND-IN for a GPU machine: Ray counts a GPU on the desktop node, its worker runs on the CPU"
                 if args.stand_in else
                 "a GPU machine: its card as the desktop, its CPU as the mac, nothing simulated" if args.card
                 else str(pair))
    report(args, where, labels, alone_line, alone_points, lines, engine, link, advice, plans, runs,
           time.perf_counter() - started, (first_line, first_points))


def one_alone(line, points: dict, runs: list, batch: int) -> dict:
    """The desktop alone, every meaning of it at ``batch``, each over the planner's line: the line; the
    sweep's own point there (the line's fit error); the sweep's plain loop measured again beside each
    ``train`` run (the machine's drift since the sweep); ``train``'s steady speed (a different data path:
    shuffled slices of real MNIST, its loss reads, its per-step bookkeeping); and ``train`` over the whole
    run (its warm-up in). Evaluation is in none of them; its seconds are given apart."""
    predicted = steady.samples_per_s(batch, line(batch))
    again = statistics.median(r["sweep_point"]["samples_per_s"] for r in runs)
    steady_train = statistics.median(r["steady"]["samples_per_s"] for r in runs)
    whole = statistics.median(r["whole_run"] for r in runs)
    sweep_point = points[batch].samples_per_s
    return {"line": round(predicted), "sweep_point": round(sweep_point), "sweep_again": round(again),
            "train_steady": round(steady_train), "train_whole_run": round(whole),
            "over_line": {"sweep_point": round(sweep_point / predicted, 3), "sweep_again": round(again / predicted, 3),
                          "train_steady": round(steady_train / predicted, 3), "train_whole_run": round(whole / predicted, 3)},
            "train_steady_over_sweep_again": round(steady_train / again, 3),
            "within_10_percent": all(0.9 <= x <= 1.1 for x in (sweep_point / predicted, steady_train / predicted)),
            "sweep_warmup_s": {str(b): round(p.warmup_s, 4) for b, p in points.items()},
            "train_warmup_s": [round(r["steady"]["warmup_s"], 4) for r in runs],
            "train_warmup_steps": runs[0]["steady"]["warmup_steps"],
            "evaluation_s": [round(r["evaluation_s"], 3) for r in runs]}


def report(args, where, labels, alone_line, alone_points, lines, engine, link, advice, plans, runs,
           seconds, first) -> None:
    print(f"pair_vs_alone: {where}")
    print(f"  global batch {args.global_batch}, {args.samples_used:,} samples × {args.epochs} passes (every plan), "
          f"target {args.target:.0%}, {args.repeats} alternations")
    print(f"  desktop alone (plain loop): {alone_line}")
    for size, point in alone_points.items():
        print(f"    sweep at {size:>5}: {point}")
    for label, line in zip(labels, lines):
        print(f"  {label}: {line}")
    print(f"  engine's own cost per exchange: {engine * 1e3:.2f} ms (sync steps of 1 + 1 samples); link: {link.name}")
    print(f"  planner's verdict: {advice.verdict}")
    print(f"  {'plan':32s} {'split':>9s} {'predicted':>10s} {'measured (each run)':>30s} {'median':>8s} "
          f"{'meas/pred':>9s} {'s to target':>11s} {'accuracy':>8s}")
    ratios, out = {}, {}
    alone_rate = statistics.median(r["samples_per_s"] for r in runs["desktop alone"])
    for name, plan in plans.items():
        rates = [r["samples_per_s"] for r in runs[name]]
        med = statistics.median(rates)
        to = [r["to_target"] / r["samples_per_s"] for r in runs[name] if r["to_target"] is not None]
        ratios[name] = round(med / plan.samples_per_s, 3)
        out[name] = {"split": list(plan.batch_sizes), "H": plan.local_steps,
                     "predicted": round(plan.samples_per_s), "measured": [round(x) for x in rates],
                     "median": round(med), "over_alone": round(med / alone_rate, 3),
                     "seconds_to_target": [round(x, 2) for x in to],
                     "accuracy": [round(r["accuracy"], 4) for r in runs[name]],
                     "warmup_s": [round(r["steady"]["warmup_s"] if "steady" in r else r["warmup_s"], 4)
                                  for r in runs[name]]}
        print(f"  {name:32s} {plan.batch_sizes[0]:>4d}:{plan.batch_sizes[1]:<4d} {plan.samples_per_s:10,.0f} "
              f"{' / '.join(f'{x:,.0f}' for x in rates):>30s} {med:8,.0f} {ratios[name]:9.2f} "
              f"{statistics.median(to) if to else float('nan'):11.2f} {statistics.median(out[name]['accuracy']):8.4f}")
    alone = one_alone(alone_line, alone_points, runs["desktop alone"], args.global_batch)
    first_line, first_points = first
    alone["first_sweep"] = {"line": [first_line.fixed_s, first_line.per_sample_s],
                            "at_batch": round(steady.samples_per_s(args.global_batch, first_line(args.global_batch))),
                            "over_line": round(alone_line(args.global_batch) / first_line(args.global_batch), 3),
                            "warmup_s": {str(k): round(v.warmup_s, 4) for k, v in first_points.items()}}
    print(f"  the same sweep in the fresh process, before Ray: {first_line}; at {args.global_batch}: "
          f"{alone['first_sweep']['over_line']:.2f} of the line the planner used")
    r = alone["over_line"]
    print(f"  the desktop alone at {args.global_batch}, over the planner's line ({alone['line']:,}): the sweep's point "
          f"{r['sweep_point']:.2f}, the sweep again beside each run {r['sweep_again']:.2f}, train steady "
          f"{r['train_steady']:.2f} (warm-up {alone['train_warmup_steps']} steps, "
          f"{statistics.median(alone['train_warmup_s']):.3f} s, apart), train over the whole run "
          f"{r['train_whole_run']:.2f}; train steady ÷ the sweep beside it {alone['train_steady_over_sweep_again']:.2f} "
          f"(the data path); evaluation {statistics.median(alone['evaluation_s']):.2f} s a run, in none of them")
    pick = next((name for name in plans if name.startswith("planner's pick")), "desktop alone")
    to_target = {name: statistics.median(o["seconds_to_target"] or [math.inf]) for name, o in out.items()}
    honest, wrong = borne_out(pick, {name: o["over_alone"] for name, o in out.items()}, to_target,
                              planner.MIN_GAIN)
    print(f"  the planner picked {pick}: " + ("the desktop alone" if pick == "desktop alone" else
          f"{out[pick]['over_alone']:.2f}× the desktop alone, target in {to_target[pick]:.2f} s against "
          f"{to_target['desktop alone']:.2f} s")
          + ("" if honest else f"  ← NOT borne out: {wrong} ran {out[wrong]['over_alone']:.2f}× the desktop alone"))
    print(json.dumps({"bench": "pair_vs_alone", "where": where, "global_batch": args.global_batch,
                      "samples": args.samples_used, "passes": args.epochs,
                      "pick": pick, "pick_borne_out": honest, "missed_or_false": wrong,
                      "verdict": advice.verdict, "engine_ms": round(engine * 1e3, 3),
                      "desktop_alone_line": [alone_line.fixed_s, alone_line.per_sample_s],
                      "worker_lines": [[x.fixed_s, x.per_sample_s] for x in lines],
                      "plans": out, "measured_over_predicted": ratios, "desktop_alone": alone,
                      "within_20_percent": all(0.8 <= r <= 1.2 for r in ratios.values()),
                      "seconds": round(seconds, 1)}))


def the_pair(args):
    """The practice cluster (a simulated Mac), your cluster at HETLAB_ADDRESS, or a GPU machine's card + CPU."""
    from hetlab import pair
    if not args.card:
        return pair.the_pair(practice_slowdown=args.slowdown)
    from hetlab.cluster.practice import PracticeCluster
    from harness.gpucheck.context import pair_workers   # the GPU check's pair: the card, then the CPU
    cluster = PracticeCluster(("desktop", "mac"), accounted_gpus={"desktop": 1})  # Ray counts the card there
    # a stand-in's desktop worker asks for that GPU as on the card ("auto": the GPU node's best device)
    return pair.Pair(pair_workers("auto" if args.stand_in else "cuda"), None, cluster)


def in_rehearsal(args) -> None:
    """Build the rehearsal, cap its link, run this benchmark on its desktop host, take it down."""
    from harness import rehearsal

    why = rehearsal.missing()
    if why:
        raise SystemExit(f"pair_vs_alone: {why}")
    rehearsal.up(args.rehearsal)
    try:
        rehearsal.set_link(args.rehearsal)
        argv = [a for a in sys.argv[1:] if a not in ("--rehearsal", args.rehearsal)]
        argv += ["--link-mbit", str(rehearsal.PROFILES[args.rehearsal])]
        done = rehearsal.run_on("desktop", [sys.executable, os.path.abspath(__file__), *argv],
                                capture_output=True, text=True, timeout=1800)
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            raise SystemExit(f"pair_vs_alone: the driver failed in the rehearsal: {done.stderr.strip()[-600:]}")
    finally:
        rehearsal.down()


if __name__ == "__main__":
    main()
