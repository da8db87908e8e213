"""How long one training step takes on a device: t(b) = fixed + b × per-sample (notebook 02).

A step has a fixed cost whatever the batch (launches, the optimizer) and a cost per sample. A card
at a small batch is nearly all fixed cost: a share of the batch given away saves it almost nothing.
``fit`` draws the line through a batch-size sweep, ``fit_rounds`` through a run's few noisy rounds.
A device's speed at batch b is its line's ``b / t(b)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from hetlab.arithmetic.steady import samples_per_s
from hetlab.errors import HetlabError


@dataclass(frozen=True)
class StepTime:
    """One device's step: ``fixed_s + b · per_sample_s`` seconds at batch b, and where it came from."""

    fixed_s: float
    per_sample_s: float
    source: str = "given"

    def __post_init__(self):
        if not all(math.isfinite(x) and x >= 0 for x in (self.fixed_s, self.per_sample_s)) \
                or self.fixed_s + self.per_sample_s <= 0:
            raise HetlabError(f"a step time needs fixed_s ≥ 0 and per_sample_s ≥ 0, not both 0; "
                              f"got {self.fixed_s} and {self.per_sample_s}.")

    def __call__(self, batch_size: float) -> float:
        """Seconds for one step at ``batch_size``."""
        return self.fixed_s + batch_size * self.per_sample_s

    @property
    def speed(self) -> float:
        """Samples per second of the per-sample part alone (``b / speed`` of a step: notebook 06)."""
        return 1 / self.per_sample_s if self.per_sample_s else math.inf

    def slowed(self, factor: float, source: str | None = None) -> "StepTime":
        """The same device ``factor``× slower in everything (a simulated slower device)."""
        return StepTime(self.fixed_s * factor, self.per_sample_s * factor, source or self.source)

    def plus(self, seconds: float, source: str | None = None) -> "StepTime":
        """The same line with ``seconds`` (≥ 0) more fixed cost a step: its messages, an exchange."""
        return StepTime(self.fixed_s + max(0.0, float(seconds)), self.per_sample_s, source or self.source)

    @property
    def formula(self) -> str:
        """The line as the course writes it, e.g. ``2.22 ms + b × 0.43 µs``."""
        return f"{self.fixed_s * 1e3:.2f} ms + b × {self.per_sample_s * 1e6:.2f} µs"

    def __str__(self) -> str:
        return f"{self.formula} ({self.source})"


def constant_speed(samples_per_s: float, source: str = "a constant speed") -> StepTime:
    """A device modelled as a constant samples/s (no fixed cost)."""
    if not (isinstance(samples_per_s, (int, float)) and math.isfinite(samples_per_s) and samples_per_s > 0):
        raise HetlabError(f"a speed must be positive samples/s, got {samples_per_s!r}.")
    return StepTime(0.0, 1.0 / samples_per_s, getattr(samples_per_s, "source", source))


def fit(batch_sizes: Sequence[float], seconds: Sequence[float], source: str = "fitted") -> StepTime:
    """The line ``fixed + b · per_sample`` closest to a sweep's step times in relative error (weights
    1/t²). Both parts stay ≥ 0: a falling sweep is flat; a line that would cross below 0 goes through 0."""
    b = [float(x) for x in batch_sizes]
    t = [float(x) for x in seconds]
    if len(b) != len(t) or len(b) < 2 or len(set(b)) < 2:
        raise HetlabError(f"fitting a step time needs at least two different batch sizes, got {b}.")
    if not all(math.isfinite(x) and x > 0 for x in b + t):
        raise HetlabError(f"batch sizes and seconds must be positive, got {b} and {t}.")
    w = [1 / x ** 2 for x in t]
    sw, sb, st = sum(w), sum(wi * bi for wi, bi in zip(w, b)), sum(wi * ti for wi, ti in zip(w, t))
    sbb = sum(wi * bi * bi for wi, bi in zip(w, b))
    sbt = sum(wi * bi * ti for wi, bi, ti in zip(w, b, t))
    slope = (sw * sbt - sb * st) / (sw * sbb - sb * sb)
    fixed = (st - slope * sb) / sw
    if slope < 0:                      # flat within noise: all fixed cost
        slope, fixed = 0.0, st / sw
    elif fixed < 0:                    # no fixed cost to see: a line through 0
        slope, fixed = sbt / sbb, 0.0
    return StepTime(fixed, slope, source)


ROUNDS_MIN_SPREAD = 0.1   # rounds' sizes closer than this share of the largest cannot tell fixed from per-sample


def fit_rounds(batch_sizes: Sequence[float], seconds: Sequence[float], weights: Sequence[float] | None = None,
               source: str = "fitted over rounds") -> StepTime:
    """One worker's line from a run's few rounds (auto-tune, ``FollowSplit``): least squares by weight
    (default 1 each). Where noise decides it (sizes too close, no positive slope, a fixed time below 0
    or above the quickest step), the heaviest round through 0, the newest of equals. A sweep falls back
    otherwise (``fit``): a flat card's sweep is flat, and calling it a constant speed would hide that."""
    b, t = [float(x) for x in batch_sizes], [float(x) for x in seconds]
    w = [1.0] * len(b) if weights is None else [float(x) for x in weights]
    if not b or not len(b) == len(t) == len(w):
        raise HetlabError(f"a line over rounds needs one batch size, time and weight per round, got {b}, {t}, {w}.")
    if not all(math.isfinite(x) and x > 0 for x in b + t + w):
        raise HetlabError(f"rounds' batch sizes, seconds and weights must be positive, got {b}, {t}, {w}.")
    sw = sum(w)
    mean_b, mean_t = sum(wi * bi for wi, bi in zip(w, b)) / sw, sum(wi * ti for wi, ti in zip(w, t)) / sw
    spread = sum(wi * (bi - mean_b) ** 2 for wi, bi in zip(w, b))
    if spread > 0 and max(b) - min(b) >= ROUNDS_MIN_SPREAD * max(b):
        slope = sum(wi * (bi - mean_b) * (ti - mean_t) for wi, bi, ti in zip(w, b, t)) / spread
        fixed = mean_t - slope * mean_b
        if slope > 0 and 0 <= fixed <= min(t):
            return StepTime(fixed, slope, source)
    i = max(range(len(b)), key=lambda j: (w[j], j))
    return StepTime(0.0, t[i] / b[i], source)


def from_sweep(batch_sizes: Sequence[int], samples_per_s: Sequence[float], source: str = "fitted") -> StepTime:
    """``fit`` to a sweep of samples/s per batch size (notebook 02's figures)."""
    return fit(batch_sizes, [b / s for b, s in zip(batch_sizes, samples_per_s)], source)


def ceiling(desktop: StepTime, mac: StepTime, global_batch: int) -> float:
    """The most the pair can gain at this global batch, nothing lost to messages: the desktop's step over
    the one where both finish together (notebook 02). Constant speeds: 1 + T_m/T_d; a flat desktop: 1."""
    b_m = max(0.0, min(float(global_batch), finish_together(global_batch, [desktop, mac])[1][1]))
    together = max(desktop(global_batch - b_m), mac(b_m)) if b_m > 0 else desktop(global_batch)
    return max(1.0, desktop(global_batch) / together)


def finish_together(global_batch: float, lines: Sequence[StepTime]) -> tuple[float, list[float]]:
    """The step T in which every device ends together, and each one's batch b_i (not rounded):
    T = (B + Σ fixed_i·speed_i) / Σ speed_i, b_i = speed_i·(T − fixed_i); below 0: take nothing. A flat
    device (per_sample 0) sets T and takes the rest; of several, the quickest (notebooks 02, 06)."""
    lines = list(lines)
    flat = [i for i, line in enumerate(lines) if line.per_sample_s == 0]
    if flat:
        quickest = min(flat, key=lambda i: lines[i].fixed_s)
        finish = lines[quickest].fixed_s
        sizes = [0.0 if i in flat else line.speed * (finish - line.fixed_s) for i, line in enumerate(lines)]
        sizes[quickest] = global_batch - sum(sizes)
        return finish, sizes
    speeds = [line.speed for line in lines]
    finish = (global_batch + sum(line.fixed_s * t for line, t in zip(lines, speeds))) / sum(speeds)
    return finish, [t * (finish - line.fixed_s) for line, t in zip(lines, speeds)]


def step_time(lines: Sequence[StepTime], batch_sizes: Sequence[float]) -> float:
    """Seconds of one synchronous step: every device waits for the slowest, max_i t_i(b_i)."""
    if len(lines) != len(batch_sizes):
        raise HetlabError(f"{len(lines)} step lines for {len(batch_sizes)} workers: give one per worker.")
    return max(line(b) for line, b in zip(lines, batch_sizes))


def efficiency(together: float, alone: Sequence[float]) -> float:
    """Samples/s together ÷ the sum of each device's alone (1.0 = nothing wasted): the one "pair ÷ sum"."""
    if not alone or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in alone):
        raise HetlabError(f"efficiency needs each device's positive samples/s alone, got {list(alone)!r}.")
    return together / sum(alone)


def predicted_efficiency(lines: Sequence[StepTime], batch_sizes: Sequence[float]) -> float:
    """The efficiency a split reaches when only waiting for the slowest is lost (notebooks 06, 07)."""
    together = samples_per_s(sum(batch_sizes), step_time(lines, batch_sizes))
    return efficiency(together, [line.speed for line in lines])


def independent_gain(first: StepTime, second: StepTime, batch_size: float) -> float:
    """Two devices each doing their own work (notebook 09's trials) against ``first`` alone: 1 + the
    second's samples/s ÷ the first's."""
    return 1 + samples_per_s(batch_size, second(batch_size)) / samples_per_s(batch_size, first(batch_size))
