"""Per-step sync vs local SGD across the rehearsal's capped link, measured against the planner.

Builds the two-host rehearsal (``python -m harness.rehearsal``: two network namespaces on this box, the
printed firewall, Ray started by the printed lines), then for each link cap — ``wifi``
(200 Mbit/s) and ``gigabit`` (1000 Mbit/s), ``tc tbf``; **no latency is emulated** (this
kernel has no netem) — a driver on the desktop host trains the small CNN through the
parameter server with a desktop and a mac worker, 1:1 split of a 128 batch:

* per-step sync, fp32 gradients up, fp32 weights down;
* local SGD, H=8 local steps, fp16 deltas up, fp32 weights down.

Measured per step: bytes that crossed the link (the kernel's counters of the desktop's
interface: Ray's framing and TCP included), step time, samples/s. Predicted:
``hetlab.arithmetic.planner.at_split`` from each worker's compute speed measured in the same run
(samples ÷ compute seconds), the server's measured update time, the cap, and the engine's fixed
cost per exchange, measured apart first: sync steps of 1 + 1 samples (compute ≈ 0), less what the
planner already counts (transfer at the cap, server, compute). Both hosts share this box's CPU: the figures are
about the link and the engine, not about a Mac. Prints a table, then as the last line one
JSON object with ``measured_over_predicted`` per cap and mode (goal: within 0.75–1.25).

Run as root: .venv/bin/python benchmarks/rehearsal_link.py [--steps 40]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository's root: harness/ is not installed

from hetlab.arithmetic import planner, steptime  # noqa: E402
from harness import rehearsal  # noqa: E402

H = 8
SPLIT = [64, 64]
TINY = [1, 1]


def link_bytes() -> int:
    """Bytes both ways through the desktop host's end of the link (run inside the desktop host)."""
    stats = f"/sys/class/net/{rehearsal.DESKTOP.ifname}/statistics"
    return sum(int(open(f"{stats}/{kind}_bytes").read()) for kind in ("rx", "tx"))


def engine_overhead(run, link, steps: int = 10) -> float:
    """Seconds per exchange that no planner term explains: sync steps of 1 + 1 samples, each
    step's wall time less its slowest compute, the server's update and the transfer at the cap."""
    from statistics import median
    by_step = {}
    for r in run.run(steps, batch_sizes=TINY):
        by_step.setdefault(r.step, []).append(r)
    rest = [max(r.step_s for r in rs) - max(r.compute_s for r in rs) - rs[0].server_s for rs in by_step.values()]
    return max(0.0, median(rest) - planner.exchange_seconds(run.n_params, link, 4))


def drive(mbit: int, steps: int) -> dict:
    """On the desktop host: train each mode, measure, predict (printed as one JSON line)."""
    from hetlab.cluster.connecting import connect
    from hetlab.core.data import load_mnist
    from hetlab.ps import ParameterServerTraining, WorkerSpec

    connect()
    workers = [WorkerSpec("desktop", role="desktop", device="cpu"), WorkerSpec("mac", role="mac", device="cpu")]
    train = load_mnist("train").subset(20_000, seed=0)
    link = planner.Link(float(mbit), 0.0, f"rehearsal {mbit} Mbit/s")
    out, overhead_s = {}, None
    for mode, kwargs, rounds, width in (("sync", {"mode": "sync"}, steps, 4),
                                        ("local_sgd", {"mode": "local_sgd", "local_steps": H,
                                                       "transfer": "fp16"}, max(2, steps // H), 2)):
        with ParameterServerTraining(workers, train, batch_sizes=SPLIT, seed=0, progress=False, **kwargs) as run:
            run.run(2)                                   # warm-up: first steps pay start-up costs
            if overhead_s is None:                       # measured once, in sync mode, apart from the timed steps
                overhead_s = engine_overhead(run, link)
            before, t0 = link_bytes(), time.perf_counter()
            records = run.run(rounds, batch_sizes=SPLIT)
            wall, moved = time.perf_counter() - t0, link_bytes() - before
            h = H if mode == "local_sgd" else 1
            speeds = []
            for name in ("desktop", "mac"):
                mine = [r for r in records if r.worker == name]
                speeds.append(steptime.constant_speed(sum(r.samples for r in mine) / sum(r.compute_s for r in mine)))
            server_s = sum(r.server_s for r in records if r.worker == "desktop") / rounds
            predicted = planner.at_split(speeds, SPLIT, run.n_params, link, h, width, server_s + overhead_s).round_s / h
            measured = wall / (rounds * h)
            out[mode] = {"step_ms": round(measured * 1e3, 2), "predicted_step_ms": round(predicted * 1e3, 2),
                         "samples_per_s": round(rounds * h * sum(SPLIT) / wall, 1),
                         "link_bytes_per_step": round(moved / (rounds * h)),
                         "predicted_bytes_per_step": round(planner.exchange_bytes(run.n_params, width) / h),
                         "speeds": [round(s) for s in speeds], "server_ms": round(server_s * 1e3, 2),
                         "engine_overhead_ms": round(overhead_s * 1e3, 2),
                         "measured_over_predicted": round(measured / predicted, 3)}
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="per-step sync steps (local SGD: steps/H rounds)")
    parser.add_argument("--driver", type=int, default=None, help=argparse.SUPPRESS)  # internal: cap in Mbit/s
    args = parser.parse_args(argv)
    if args.driver is not None:
        print(json.dumps(drive(args.driver, args.steps)))
        return {}
    why = rehearsal.missing()
    if why:
        raise SystemExit(f"rehearsal_link: {why}")
    started = time.perf_counter()
    state = rehearsal.up("wifi")
    results = {}
    try:
        for profile in ("wifi", "gigabit"):
            rehearsal.set_link(profile)
            done = rehearsal.run_on("desktop", [sys.executable, os.path.abspath(__file__), "--driver",
                                                str(rehearsal.PROFILES[profile]), "--steps", str(args.steps)],
                                    capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise SystemExit(f"rehearsal_link: the driver failed on {profile}: {done.stderr.strip()[-400:]}")
            results[profile] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        rehearsal.down()
    print(f"rehearsal up in {state['up_s']:.0f} s; link capped with tc tbf, no latency emulated (no netem)")
    print(f"{'cap':8s} {'mode':10s} {'step ms':>8s} {'predicted':>9s} {'meas/pred':>9s} {'samples/s':>10s} "
          f"{'link B/step':>12s} {'planner B/step':>14s} {'overhead ms':>11s}")
    ratios = {}
    for profile, modes in results.items():
        for mode, r in modes.items():
            ratios[f"{profile}/{mode}"] = r["measured_over_predicted"]
            print(f"{profile:8s} {mode:10s} {r['step_ms']:8.1f} {r['predicted_step_ms']:9.1f} "
                  f"{r['measured_over_predicted']:9.2f} {r['samples_per_s']:10.0f} "
                  f"{r['link_bytes_per_step']:12,d} {r['predicted_bytes_per_step']:14,d} {r['engine_overhead_ms']:11.1f}")
    summary = {"bench": "rehearsal_link", **results, "measured_over_predicted": ratios,
               "within_25_percent": all(0.75 <= v <= 1.25 for v in ratios.values()),
               "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
