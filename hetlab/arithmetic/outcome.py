"""What one technique did on the pair, read from its step records (notebooks 05, 07, 08; the report).

One dict per run: its steady speed (``hetlab.arithmetic.steady``: warm-up apart, windows of steps),
its efficiency against the sum of its workers alone (each worker's own device speed, from the same
records), the share of the workers' time spent on messages, its seconds, its final accuracy and
whether it reached the course's target by the end. No torch, no Ray: records are read by field.
"""
from __future__ import annotations

from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, steady
from hetlab.errors import HetlabError

TARGET = 0.9   # the course's target accuracy for the small CNN (01 reaches it in one epoch)


def speed_of(step_seconds, samples, warmup: int = WARMUP_STEPS, windows: int = WINDOWS):
    """``steady`` for a run of any length: fewer warm-up steps (and windows) when the run is short."""
    n = len(step_seconds)
    if n < 1:
        raise HetlabError("no steps: a speed needs at least one timed step.")
    windows = max(1, min(windows, n))
    return steady(step_seconds, samples, warmup=max(0, min(warmup, n - windows)), windows=windows)


def technique(records, accuracy: float | None = None, *, target: float = TARGET,
              warmup: int = WARMUP_STEPS) -> dict:
    """A run's figures from its ``StepRecord``s (sync: one per worker and step; async and local SGD:
    one per message): speed, efficiency, communication share, seconds, accuracy, time to target."""
    records = list(records)
    if not records:
        raise HetlabError("technique() needs the run's step records.")
    steps: dict = {}
    for r in records:                               # a sync step's records share one step_s: count it once
        seconds, samples = steps.get(r.step, (r.step_s, 0))
        steps[r.step] = (seconds, samples + r.samples)
    ordered = [steps[k] for k in sorted(steps)]
    speed = speed_of([s for s, _ in ordered], [n for _, n in ordered], warmup)
    alone = 0.0
    for name in sorted({r.worker for r in records}):
        mine = [r for r in records if r.worker == name]
        busy = sum(r.device_s for r in mine)
        alone += sum(r.samples for r in mine) / busy if busy > 0 else 0.0
    spent = sum(r.device_s + r.comm_s + r.wait_s for r in records)
    seconds = sum(s for s, _ in ordered)
    reached = accuracy is not None and accuracy >= target
    return {"speed": speed.as_dict(), "efficiency": speed.samples_per_s / alone if alone else None,
            "sum_alone": alone, "comm_share": sum(r.comm_s for r in records) / spent if spent else None,
            "seconds": seconds, "accuracy": accuracy, "target": target,
            "time_to_target_s": seconds if reached else None}


def across(seconds, samples):
    """A speed from several runs or trials (each one window, no warm-up inside): notebook 09's trials."""
    pairs = [(s, n) for s, n in zip(seconds, samples) if s > 0 and n > 0]
    if not pairs:
        raise HetlabError("across() needs at least one run with seconds and samples.")
    return steady([s for s, _ in pairs], [n for _, n in pairs], warmup=0, windows=len(pairs))
