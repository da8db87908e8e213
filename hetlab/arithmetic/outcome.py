"""What one technique did on the pair, read from its step records (notebooks 05, 07, 08; the report):
its steady speed, its efficiency against the sum of its workers alone, its communication share, its
conditions and its time to target (``first_crossing``). Records are read by field: no torch, no Ray.
"""
from __future__ import annotations

from statistics import median_low

from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, steady
from hetlab.errors import HetlabError

TARGET = 0.9   # the course's target accuracy for the small CNN (01 reaches it in one epoch)


def conditions(batch_sizes, roles, steps: int, samples: int, devices=None) -> dict:
    """What a run on the pair ran under: the global batch, the split (desktop first), the roles, its
    steps and samples, each worker's device."""
    split = [int(b) for b in batch_sizes]
    return {"batch": sum(split), "split": split, "roles": [str(r) for r in roles], "steps": int(steps),
            "samples": int(samples), "devices": [str(d) for d in devices] if devices else None}


def first_crossing(checks, target: float = TARGET, every: int | None = None,
                   test_samples: int | None = None) -> dict:
    """Time to target from ``checks``, (training seconds so far, accuracy) per evaluation: the first
    at or above ``target``, else None (not reached)."""
    checks = [(float(s), float(a)) for s, a in checks]
    crossed = next((s for s, a in checks if a >= target), None)
    return {"time_to_target_s": crossed, "checks": len(checks), "check_every_steps": every,
            "check_samples": test_samples, "checked_s": checks[-1][0] if checks else None}


def technique(records, accuracy: float | None = None, *, checked: dict | None = None, devices=None) -> dict:
    """A run's figures from its ``StepRecord``s, with its time to target when ``checked`` (as
    ``ParameterServerTraining.run_checked`` gives it) says it was evaluated as it went."""
    records = list(records)
    if not records:
        raise HetlabError("technique() needs the run's step records.")
    steps: dict = {}
    for r in records:                               # a sync step's records share one step_s: count it once
        seconds, samples = steps.get(r.step, (r.step_s, 0))
        steps[r.step] = (seconds, samples + r.samples)
    ordered = [steps[k] for k in sorted(steps)]
    windows = min(WINDOWS, len(ordered))         # a short run: fewer windows, and fewer warm-up steps
    speed = steady([s for s, _ in ordered], [n for _, n in ordered], min(WARMUP_STEPS, len(ordered) - windows), windows)
    alone = 0.0
    for name in sorted({r.worker for r in records}):
        mine = [r for r in records if r.worker == name]
        busy = sum(r.device_s for r in mine)
        alone += sum(r.samples for r in mine) / busy if busy > 0 else 0.0
    spent = sum(r.device_s + r.comm_s + r.wait_s for r in records)
    seconds = sum(s for s, _ in ordered)
    workers = sorted({r.worker for r in records}, key=lambda w: (w != "desktop", w))
    split = [median_low([r.batch_size for r in records if r.worker == w]) for w in workers]   # desktop first
    return {"speed": speed.as_dict(), "efficiency": speed.samples_per_s / alone if alone else None,
            "sum_alone": alone, "comm_share": sum(r.comm_s for r in records) / spent if spent else None,
            "seconds": seconds, "accuracy": accuracy, "target": TARGET,
            **conditions(split, workers, len(ordered), sum(r.samples for r in records), devices),
            **first_crossing((checked or {}).get("checks", []), TARGET, (checked or {}).get("every"),
                             (checked or {}).get("test_samples")),
            "unit": (checked or {}).get("unit", "steps")}   # steps, or local SGD's rounds of H steps each

