"""The split: per-worker batch sizes that end a synchronous step together (notebooks 05, 06, 08).

``split_batch`` rounds proportions to whole samples that add up to the global batch; ``auto_tune``
measures, fits each worker's step line over its rounds and moves toward the split where all finish
together (``steptime.finish_together``); ``follow_split`` moves a running split only when that makes
the step clearly faster.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from dataclasses import dataclass, field
from typing import Callable, Sequence

from hetlab.errors import HetlabError
from hetlab.arithmetic.steptime import StepTime, efficiency, finish_together, fit_rounds, step_time  # efficiency: 06, 07


def check_proportions(weights: Sequence[float], n: int | None = None) -> list[float]:
    """Proportions (a split, or each worker's samples/s) as floats: finite, positive, ``n`` of them if given."""
    values = None if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__") else list(weights)
    if not values or (n is not None and len(values) != n) or not all(
            isinstance(w, Real) and not isinstance(w, bool) and math.isfinite(w) and w > 0 for w in values):
        raise HetlabError(f"proportions {weights!r}: give one positive number per worker, e.g. [4, 1]"
                          f"{f' for {n} workers' if n is not None else ''}.")
    return [float(w) for w in values]


def split_batch(global_batch: int, weights: Sequence[float], n: int | None = None) -> list[int]:
    """Split ``global_batch`` into whole sizes ≥ 1 proportional to ``weights``, by largest remainder, so
    they sum exactly to ``global_batch``: ``split_batch(64, [4, 1]) == [51, 13]``."""
    w = check_proportions(weights, n)
    if isinstance(global_batch, bool) or not isinstance(global_batch, Integral) or global_batch < len(w):
        raise HetlabError(f"global batch {global_batch!r} must be a whole number ≥ {len(w)}: each of the "
                          f"{len(w)} workers needs at least one sample, e.g. 128.")
    global_batch = int(global_batch)
    total = sum(w)
    exact = [global_batch * wi / total for wi in w]
    sizes = [math.floor(q) for q in exact]
    left = global_batch - sum(sizes)
    by_remainder = sorted(range(len(w)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in by_remainder[:left]:
        sizes[i] += 1
    for i in range(len(sizes)):  # a tiny share still gets one sample ...
        if sizes[i] == 0:
            sizes[i] = 1
    while sum(sizes) > global_batch:  # ... taken from whoever got most above its share
        donor = max((j for j in range(len(sizes)) if sizes[j] > 1),
                    key=lambda j: (sizes[j] - exact[j], sizes[j]))
        sizes[donor] -= 1
    return sizes


def format_split(sizes: Sequence[float]) -> str:
    """A readable split, e.g. [51, 13] → '51:13 (80% / 20%)'."""
    total = sum(check_proportions(sizes))
    shares = " / ".join(f"{100 * s / total:.0f}%" for s in sizes)
    return f"{':'.join(f'{s:g}' for s in sizes)} ({shares})"


@dataclass
class TuneRound:
    """One measurement: the sizes tried and the per-worker samples/s they gave."""

    batch_sizes: list[int]
    samples_per_s: list[float]


@dataclass
class TuneResult:
    """What ``auto_tune`` recommends, and every round it measured on the way."""

    batch_sizes: list[int]
    history: list[TuneRound] = field(default_factory=list)
    converged: bool = False
    lines: list[StepTime] = field(default_factory=list)   # each worker's line, fitted over the rounds

    def __str__(self) -> str:
        state = "settled" if self.converged else "not settled"
        return f"batch sizes {format_split(self.batch_sizes)} after {len(self.history)} rounds ({state})"


TOL = 0.02   # a split whose step is within 2 % of the target's is settled


def auto_tune(measure: Callable[[list[int]], Sequence[float]], global_batch: int,
              n_workers: int, rounds: int = 6, confirm: int = 1, start: Sequence[int] | None = None) -> TuneResult:
    """Measure, fit each worker's step line, move ``damping`` of the way to the split where all finish
    together (halved when a size turns back); repeat (notebook 06).

    ``measure(batch_sizes)``: each worker's samples/s at those sizes. Starts from ``start`` (else an
    equal split); settled when the move gains less than ``TOL``, ``converged`` once ``confirm`` more
    rounds agree (one round on a busy machine can be 10 % off), else stops after ``rounds``."""
    for name, value, least in (("n_workers", n_workers, 1), ("rounds", rounds, 1), ("confirm", confirm, 0)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
            raise HetlabError(f"{name} must be a whole number ≥ {least}, got {value!r}.")
    sizes = split_batch(global_batch, list(start) if start is not None else [1.0] * n_workers, n_workers)
    history: list[TuneRound] = []
    last_move, agreed, damping = [0] * n_workers, 0, 1.0
    for _ in range(rounds):
        measured = list(measure(list(sizes)))
        try:
            speeds = check_proportions(measured, n_workers)
        except HetlabError as e:
            raise HetlabError(f"measure({sizes}) returned {measured!r}, not one positive samples/s per worker ({e})") from None
        history.append(TuneRound(list(sizes), speeds))
        lines = round_lines(history)
        target = equal_finish_split(global_batch, lines)
        settled = step_time(lines, sizes) <= (1 + TOL) * step_time(lines, target)
        if not settled:
            move = [t - s for t, s in zip(target, sizes)]
            if any(m * lm < 0 for m, lm in zip(move, last_move)):
                damping /= 2
            new = split_batch(global_batch, [max(s + damping * m, 1e-9) for s, m in zip(sizes, move)])
            settled = new == sizes  # the damped move rounds to no change: settled as far as integers go
        if settled:
            agreed += 1
            if agreed > confirm:
                return TuneResult(list(sizes), history, converged=True, lines=lines)
            continue  # measure these sizes once more before trusting them
        last_move, agreed = [n - s for n, s in zip(new, sizes)], 0
        sizes = new
    return TuneResult(list(sizes), history, converged=False, lines=lines)


STALE_HALVES = 0.5   # a round counts this much less for each round measured after it


def round_lines(history: Sequence[TuneRound]) -> list[StepTime]:
    """Each worker's line over auto-tune's rounds (``steptime.fit_rounds``), a round weighing its batch
    size (a few samples' step is mostly fixed cost) times ``STALE_HALVES`` per newer round."""
    n = len(history)
    return [fit_rounds([r.batch_sizes[i] for r in history], [r.batch_sizes[i] / r.samples_per_s[i] for r in history],
                       [r.batch_sizes[i] * STALE_HALVES ** (n - 1 - k) for k, r in enumerate(history)],
                       f"worker {i}, fitted over {n} auto-tune rounds")
            for i in range(len(history[-1].batch_sizes))]


def equal_finish_split(global_batch: int, lines: Sequence[StepTime]) -> list[int]:
    """Sizes with which every worker finishes together (``steptime.finish_together``), in whole samples."""
    return split_batch(global_batch, [max(b, 1e-9) for b in finish_together(global_batch, lines)[1]])


FOLLOW_GAIN = 0.05   # the split follows the machines only for a step this much faster: noise does not move it


def follow_split(batch_sizes: Sequence[int], lines: Sequence[StepTime]) -> list[int]:
    """The split to use next for the step lines just measured (notebook 06): ``equal_finish_split``'s
    when it makes the step more than ``FOLLOW_GAIN`` faster, else ``batch_sizes``, so noise does not move it."""
    target = equal_finish_split(sum(batch_sizes), lines)
    now, then = (step_time(lines, sizes) for sizes in (batch_sizes, target))
    return target if now > (1 + FOLLOW_GAIN) * then else list(batch_sizes)


def scale_local_steps(local_steps: int, samples_per_s: Sequence[float]) -> list[int]:
    """Speed-scaled local SGD (notebook 08): the fastest worker takes ``local_steps`` steps a round,
    every other one ∝ its speed (at least 1): ``scale_local_steps(8, [2000, 1000]) == [8, 4]``."""
    if isinstance(local_steps, bool) or not isinstance(local_steps, Integral) or local_steps < 1:
        raise HetlabError(f"local_steps must be a whole number ≥ 1, got {local_steps!r}.")
    t = check_proportions(samples_per_s)
    return [max(1, round(local_steps * ti / max(t))) for ti in t]
