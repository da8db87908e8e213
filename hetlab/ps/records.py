"""What a run keeps (notebooks 05, 06, 08): ``StepRecord``s, ``Event``s, and what is read from records
(the cluster's samples/s, a worker's idle share and speed, the engine's cost per exchange). No Ray."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from hetlab.core import simulate
from hetlab.errors import HetlabError
from hetlab.arithmetic.steady import samples_per_s
from hetlab.arithmetic.steptime import StepTime


@dataclass(frozen=True)
class StepRecord:
    """One worker's share of one step: where its time went (notebooks 05, 06)."""

    step: int
    worker: str
    batch_size: int
    compute_s: float             # the worker's forward/backward (device synced)
    simulated_s: float           # the sleep of a *simulated* slower device
    wait_s: float                # sync: idle behind the straggler; async: idle before this message started
    comm_s: float                # the driver's round trip minus compute_s + simulated_s
    loss: float
    staleness: int = 0
    server_s: float = 0.0        # server combine + optimizer step
    update_s: float = 0.0        # the driver's time for the update: gradients in, server_s, weights out
    step_s: float = 0.0          # wall time of the whole step (async: since the previous update)
    samples: int = 0             # samples behind this message (local SGD: H × batch_size); 0: batch_size

    def __post_init__(self):
        if not self.samples:
            object.__setattr__(self, "samples", self.batch_size)

    @property
    def device_s(self) -> float:
        """Its device's time: its compute + a simulated slower device's sleep."""
        return simulate.device_seconds(self.compute_s, self.simulated_s)


def wall_s(records) -> float:
    """The wall time of the steps behind ``records`` (a sync step's records share one ``step_s``)."""
    return sum({r.step: r.step_s for r in records}.values())


def cluster_samples_per_s(records) -> float:
    """The cluster's speed over ``records``: every worker's samples ÷ the wall time of their steps."""
    return samples_per_s(sum(r.samples for r in records), wall_s(records))


def idle_share(records, name: str) -> float:
    """Share of the run's wall time worker ``name`` sat idle (sync: behind the straggler; async: held
    back by the staleness bound)."""
    wall = wall_s(records)
    return sum(r.wait_s for r in records if r.worker == name) / wall if wall > 0 else 0.0


@dataclass(frozen=True)
class WorkerSteps:
    """One worker's steps read from its records: the one home of its speed (notebooks 05, 06)."""

    device_samples_per_s: float  # its device: Σ samples ÷ Σ (compute + simulated) s (the split)
    comm_s: float                # its messages: mean seconds per step
    batch: float                 # its mean batch per step (local SGD: per inner step)
    samples_per_s: float         # median of each step's samples ÷ (device + comm) s: auto_tune splits by it

    @property
    def line(self) -> StepTime:
        """Its step before its gradient is back: its messages, then b ÷ its device's speed."""
        per_sample = 1 / self.device_samples_per_s if self.device_samples_per_s > 0 else 0.0
        return StepTime(self.comm_s, per_sample, "in-step records")

    @property
    def back_s(self) -> float:
        """Mean seconds from a step's start until its gradient is back (notebook 05, "who waits")."""
        return self.line(self.batch)


def worker_steps(records) -> WorkerSteps:
    """``WorkerSteps`` of the records of ONE worker (a median: a step something else slowed is one of them)."""
    records = list(records)
    if not records:
        return WorkerSteps(0.0, 0.0, 0.0, 0.0)
    busy = sum(r.device_s for r in records)
    samples = sum(r.samples for r in records)
    each = [samples_per_s(r.samples, s) for r in records if (s := r.device_s + r.comm_s) > 0]
    return WorkerSteps(samples_per_s(samples, busy), sum(r.comm_s for r in records) / len(records),
                       sum(r.batch_size for r in records) / len(records), statistics.median(each) if each else 0.0)


def per_worker_samples_per_s(records, names: list[str]) -> list[float]:
    """Each worker's own samples/s when it is not waiting (``WorkerSteps.samples_per_s``)."""
    return [worker_steps(r for r in records if r.worker == name).samples_per_s for name in names]


def exchange_costs(records) -> dict[str, float]:
    """Per worker, the median seconds of a synchronous step that were neither its device's work
    nor its wait for the others: its messages (the link included) and the server's update."""
    costs: dict[str, list[float]] = {}
    for r in records:
        costs.setdefault(r.worker, []).append(r.step_s - r.device_s - r.wait_s)
    return {name: max(0.0, statistics.median(c)) for name, c in costs.items()}


def engine_cost(records) -> float:
    """The engine's own seconds per exchange (the planner's ``engine_s``): the least of ``exchange_costs``,
    that of the worker beside the server, whose messages cross no link."""
    if not records:
        raise HetlabError("engine_cost needs the records of at least one synchronous step.")
    return min(exchange_costs(records).values())


@dataclass(frozen=True)
class Event:
    """Something that happened to a run at server step ``step``: ``what`` is "resplit" (``before`` →
    ``after``, ``why``, FollowSplit's ``lines``), "lost" (``worker``, ``reason``, ``survivors``, ``time``),
    "all lost", "slowdown", "checkpoint" or "resumed" (``path``)."""

    step: int
    what: str
    why: str = ""
    before: tuple = ()
    after: tuple = ()
    lines: tuple = ()
    worker: str = ""
    reason: str = ""
    survivors: tuple = ()
    time: float = 0.0
    slowdown: float = 1.0
    path: str = ""
