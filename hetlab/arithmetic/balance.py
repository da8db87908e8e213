"""Per-worker batch sizes from measured speed, and an auto-tuner (notebooks 05, 06).

Synchronous data parallelism waits for the slowest worker: a batch ``b_i ∝ t_i`` (its samples/s)
makes every worker take the same ``b_i / t_i`` seconds. ``split_batch`` turns a ratio into integer
sizes that add up to the global batch; ``auto_tune`` re-splits with a step of fixed + batch ÷ speed,
and shifts the split for the steps' scatter (``split_for_noise``: each step waits for whichever worker
is slower *that* step). Every step here is a ``steptime.StepTime`` line; a speed alone is
``steptime.constant_speed``.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from dataclasses import dataclass, field
from typing import Callable, Sequence

from hetlab.errors import HetlabError
from hetlab.arithmetic import steptime
from hetlab.arithmetic.steptime import (StepTime, constant_speed, efficiency, finish_together, fit_rounds,  # efficiency: 06, 07
                                       step_time)


def check_proportions(weights: Sequence[float], n: int | None = None) -> list[float]:
    """Validate proportions (a ratio, or each worker's samples/s): finite, positive numbers, ``n`` of them if given."""
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise HetlabError(f"ratio {weights!r} must be a list of numbers, e.g. [4, 1].")
    values = list(weights)
    if not values:
        raise HetlabError("ratio is empty: give one positive number per worker, e.g. [4, 1].")
    if n is not None and len(values) != n:
        raise HetlabError(
            f"ratio {values} has {len(values)} entries but there are {n} workers: give one per worker."
        )
    for i, w in enumerate(values):
        if isinstance(w, bool) or not isinstance(w, Real):
            raise HetlabError(f"ratio entry {i} is {w!r}: every entry must be a number.")
        if not math.isfinite(w):
            raise HetlabError(f"ratio entry {i} is {w}: every entry must be a finite number.")
        if w <= 0:
            raise HetlabError(
                f"ratio entry {i} is {w}: every worker needs a positive share (remove a worker instead of giving it 0)."
            )
    return [float(w) for w in values]


def split_batch(global_batch: int, weights: Sequence[float], n: int | None = None) -> list[int]:
    """Split ``global_batch`` into integer sizes ≥ 1 proportional to ``weights`` (notebook 05).

    Largest-remainder rounding: each worker gets the floor of its exact share, and the
    samples left over go to the largest fractional parts, so the sizes sum exactly to
    ``global_batch``. ``split_batch(64, [4, 1]) == [51, 13]``.
    """
    w = check_proportions(weights, n)
    if isinstance(global_batch, bool) or not isinstance(global_batch, Integral):
        raise HetlabError(f"global batch {global_batch!r} must be a whole number, e.g. 128.")
    global_batch = int(global_batch)
    if global_batch < len(w):
        raise HetlabError(
            f"global batch {global_batch} is smaller than the number of workers ({len(w)}): each worker needs at least one sample."
        )
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


def shares_of(sizes: Sequence[float]) -> list[float]:
    """Sizes (or samples/s) as each one's share, summing to 1, e.g. [48, 16] → [0.75, 0.25]."""
    w = check_proportions(sizes)
    total = sum(w)
    return [wi / total for wi in w]


def format_split(sizes: Sequence[float]) -> str:
    """A readable split, e.g. [51, 13] → '51:13 (80% / 20%)'."""
    parts = ":".join(f"{s:g}" for s in sizes)
    return f"{parts} ({' / '.join(f'{100 * r:.0f}%' for r in shares_of(sizes))})"


# --- auto-tuning (notebook 06) -------------------------------------------------------------

class Measurement(list):
    """Each worker's samples/s, as ``auto_tune``'s ``measure`` returns them (``training.measure``),
    and ``step_seconds``: each measured step's seconds, one per worker, or [] when only the speeds are known."""

    def __init__(self, samples_per_s: Sequence[float], step_seconds: Sequence[Sequence[float]] = ()):
        super().__init__(samples_per_s)
        self.step_seconds = [list(step) for step in step_seconds]


@dataclass
class TuneRound:
    """One measurement: the sizes tried, the per-worker samples/s they gave and, when ``measure``
    told them, each step's seconds per worker (``Measurement.step_seconds``)."""

    batch_sizes: list[int]
    samples_per_s: list[float]
    step_seconds: list[list[float]] = field(default_factory=list)

    @property
    def predicted_efficiency(self) -> float:
        """What this split reaches if each worker kept this round's samples/s at any size."""
        return steptime.predicted_efficiency([constant_speed(t) for t in self.samples_per_s], self.batch_sizes)


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


# Each round fits fixed + b / speed per worker (``round_lines``; a split ∝ samples/s alone leaves
# the fast one waiting) and moves ``damping`` of the way to the split with the least mean step under
# the rounds' scatter (``split_for_noise``; with no steps told, ``equal_finish_split``), halving it
# when a size turns back. Settled: the move gains less than ``tol`` or rounds to nothing. Told the
# steps, it then takes a last move that gains less than ``tol`` unmeasured: one round cannot tell that
# gain from noise, the scatter of all the rounds' steps can (notebook 06, §3). ``confirm``: one
# round on a busy box can be 10 % off; on the practice pair 1 tuning in 10 settled > 5 % from the
# best step, 1 in 24 with a confirming round (tests/test_balance.py).
TOL = 0.02   # a split whose step is within 2 % of the target's is settled


def auto_tune(measure: Callable[[list[int]], Sequence[float]], global_batch: int,
              n_workers: int, rounds: int = 6, confirm: int = 1, start: Sequence[int] | None = None) -> TuneResult:
    """Measure, fit each worker's step time, re-split so all finish together; repeat (notebook 06).

    ``measure(batch_sizes)``: each worker's samples/s at those sizes (``training.measure``, which warms
    each new size up first: MPS compiles per shape). Starts from ``start`` (else an equal split); stops
    ``converged`` once ``confirm`` more rounds agree on a settled split (a move gaining under ``TOL``
    of the step), else after ``rounds``. A move that reverses the last one is halved."""
    if isinstance(n_workers, bool) or not isinstance(n_workers, Integral) or n_workers < 1:
        raise HetlabError(f"n_workers must be a positive whole number, got {n_workers!r}.")
    if isinstance(rounds, bool) or not isinstance(rounds, Integral) or rounds < 1:
        raise HetlabError(f"rounds must be at least 1, got {rounds!r}.")
    if isinstance(confirm, bool) or not isinstance(confirm, Integral) or confirm < 0:
        raise HetlabError(f"confirm must be a whole number of rounds ≥ 0, got {confirm!r}.")
    sizes = split_batch(global_batch, list(start) if start is not None else [1.0] * n_workers, n_workers)
    history: list[TuneRound] = []
    last_move, agreed, damping = [0] * n_workers, 0, 1.0
    for _ in range(rounds):
        told = measure(list(sizes))
        measured = list(told)
        try:
            speeds = check_proportions(measured, n_workers)
        except HetlabError as e:
            raise HetlabError(f"measure({sizes}) returned {measured!r}, not one positive samples/s per worker ({e})") from None
        history.append(TuneRound(list(sizes), speeds, _steps_of(told, n_workers)))
        lines, scatter = round_lines(history), step_scatter(history)
        target = split_for_noise(global_batch, lines, scatter)
        settled = near = mean_step(lines, sizes, scatter) <= (1 + TOL) * mean_step(lines, target, scatter)
        if not settled:
            move = [t - s for t, s in zip(target, sizes)]
            if any(m * lm < 0 for m, lm in zip(move, last_move)):
                damping /= 2
            new = split_batch(global_batch, [max(s + damping * m, 1e-9) for s, m in zip(sizes, move)])
            settled = new == sizes  # the damped move rounds to no change: settled as far as integers go
        if settled:
            agreed += 1
            if agreed > confirm:  # told the steps: the last move (gaining < tol) is taken unmeasured
                final = target if scatter and near else sizes
                return TuneResult(list(final), history, converged=True, lines=lines)
            continue  # measure these sizes once more before trusting them
        last_move, agreed = [n - s for n, s in zip(new, sizes)], 0
        sizes = new
    return TuneResult(list(sizes), history, converged=False, lines=lines)


STALE_HALVES = 0.5   # a round counts this much less for each round measured after it


def round_lines(history: Sequence[TuneRound]) -> list[StepTime]:
    """Each worker's line over auto-tune's rounds (``steptime.fit_rounds``). A round weighs its
    batch size (a few samples' step is mostly fixed cost, no speed to read) times how fresh its
    split is: ``STALE_HALVES`` per newer round. The first, equal round is the largest for the slow
    worker and the stalest: the machines then shared their cores otherwise (issue 60)."""
    n = len(history)
    return [fit_rounds([r.batch_sizes[i] for r in history], [r.batch_sizes[i] / r.samples_per_s[i] for r in history],
                       [r.batch_sizes[i] * STALE_HALVES ** (n - 1 - k) for k, r in enumerate(history)],
                       f"worker {i}, fitted over {n} auto-tune rounds")
            for i in range(len(history[-1].batch_sizes))]


def equal_finish_split(global_batch: int, lines: Sequence[StepTime]) -> list[int]:
    """Sizes with which every worker finishes together (``steptime.finish_together``, rounded to
    whole samples); a step's messages: ``StepTime.plus`` (notebooks 02, 06)."""
    return split_batch(global_batch, [max(b, 1e-9) for b in finish_together(global_batch, lines)[1]])


def _steps_of(measured, n_workers: int) -> list[list[float]]:
    """``measured.step_seconds`` (a ``Measurement``) checked: one positive, finite seconds per worker a step; else []."""
    steps = [list(step) for step in getattr(measured, "step_seconds", [])]
    ok = all(len(step) == n_workers and all(isinstance(t, Real) and math.isfinite(t) and t > 0 for t in step)
             for step in steps)
    return steps if ok else []


def step_scatter(history: Sequence[TuneRound]) -> list[list[float]]:
    """Each step auto-tune measured, as each worker's seconds ÷ that worker's median step in its round:
    1.0 a usual step, 1.2 one that took 20 % longer (the box, the link, the device's own noise)."""
    scatter = []
    for r in history:
        medians = [sorted(column)[len(column) // 2] for column in zip(*r.step_seconds)]
        scatter += [[t / m for t, m in zip(step, medians)] for step in r.step_seconds]
    return scatter


def mean_step(lines: Sequence[StepTime], batch_sizes: Sequence[float], scatter: Sequence[Sequence[float]] = ()) -> float:
    """The mean synchronous step at these sizes when each worker's step scatters as in ``scatter``
    (``step_scatter``): each step lasts as long as its slower worker *in that step*. No scatter: ``step_time``."""
    if not scatter:
        return step_time(lines, batch_sizes)
    return sum(max(line(b) * r for line, b, r in zip(lines, batch_sizes, step)) for step in scatter) / len(scatter)


def split_for_noise(global_batch: int, lines: Sequence[StepTime], scatter: Sequence[Sequence[float]] = ()) -> list[int]:
    """The split with the least ``mean_step`` (notebook 06): from ``equal_finish_split``, samples move
    where they shorten the mean step most, ``global_batch // 256`` at a time, then half as many, down
    to one sample when no move does (the mean step is convex in the sizes: no trap on the way).

    Why it differs: a sample taken from the worker whose sample costs most (the Mac) saves it more
    than it costs the other, so it pays until that worker is the slower one in only a few steps
    (about c_fast ÷ (c_fast + c_slow) of them, c: seconds per sample). No scatter: the equal finish."""
    sizes = equal_finish_split(global_batch, lines)
    best, step = mean_step(lines, sizes, scatter), max(1, global_batch // 256) if scatter else 0
    while step:
        moves = [[b - step * (k == i) + step * (k == j) for k, b in enumerate(sizes)]
                 for i in range(len(sizes)) for j in range(len(sizes)) if i != j and sizes[i] > step]
        shortest = min(moves, key=lambda m: mean_step(lines, m, scatter), default=sizes)
        if mean_step(lines, shortest, scatter) < best * (1 - 1e-9):
            sizes, best = shortest, mean_step(lines, shortest, scatter)
        else:
            step //= 2
    return sizes


# --- following the machines during training (notebooks 06, 08) ------------------------------

FOLLOW_GAIN = 0.05   # the split follows the machines only for a step this much faster: noise does not move it


def follow_split(batch_sizes: Sequence[int], lines: Sequence[StepTime]) -> list[int]:
    """The split to use next, given the step lines just measured (notebook 06, "the split that follows").

    Worker i's step is its line (its messages' fixed cost included); ``equal_finish_split`` gives
    the sizes with which all finish together. That split is returned when it makes the step more
    than ``FOLLOW_GAIN`` faster; otherwise ``batch_sizes`` stay, so noise does not move the split.
    """
    target = equal_finish_split(sum(batch_sizes), lines)
    now, then = (step_time(lines, sizes) for sizes in (batch_sizes, target))
    return target if now > (1 + FOLLOW_GAIN) * then else list(batch_sizes)


def scale_local_steps(local_steps: int, samples_per_s: Sequence[float]) -> list[int]:
    """Speed-scaled local SGD (notebook 08): the fastest worker takes ``local_steps`` steps
    per round, every other one ∝ its speed (at least 1), so with equal batches all finish
    a round together. ``scale_local_steps(8, [2000, 1000]) == [8, 4]``."""
    if isinstance(local_steps, bool) or not isinstance(local_steps, Integral) or local_steps < 1:
        raise HetlabError(f"local_steps must be a whole number ≥ 1, got {local_steps!r}.")
    t = check_proportions(samples_per_s)
    return [max(1, round(local_steps * ti / max(t))) for ti in t]
