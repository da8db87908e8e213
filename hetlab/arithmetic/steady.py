"""One definition of a measured speed: warm-up apart, then windows of timed steps (notebooks 01, 02, report).

The first ``warmup`` steps of a run (CUDA's start, cudnn's search, a compile) are reported apart,
never averaged in. The rest is cut into ``windows`` equal windows, and the speed is the median of
their samples/s, with the lowest and highest beside it: one run yields its own spread.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

from hetlab.errors import HetlabError

WARMUP_STEPS = 5   # as Stanford CS336's hand-in: 5 warm-up steps, then the timed ones
WINDOWS = 3        # at least three windows: a median and a spread


@dataclass(frozen=True)
class SteadySpeed:
    """Samples/s in steady state: the median of the windows, their range, and the warm-up apart."""

    samples_per_s: float            # median over the windows
    low: float                      # the slowest window
    high: float                     # the fastest window
    windows: tuple[float, ...]      # each window's samples/s, in run order
    steps: int                      # timed steps (all windows)
    warmup_steps: int
    warmup_s: float                 # the warm-up's seconds, reported beside the speed

    @property
    def spread(self) -> float:
        """(high − low) ÷ median: 0.05 means the windows lie within 5 % of each other."""
        return (self.high - self.low) / self.samples_per_s if self.samples_per_s else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "windows": list(self.windows), "spread": self.spread}

    def __str__(self) -> str:
        return (f"{self.samples_per_s:,.0f} samples/s (windows {self.low:,.0f}–{self.high:,.0f}, "
                f"n={len(self.windows)}; warm-up {self.warmup_steps} steps, {self.warmup_s:.2f} s, left out)")


def samples_per_s(samples: float, seconds: float) -> float:
    """The one speed: samples trained ÷ the seconds they took (0.0 when no time passed)."""
    return samples / seconds if seconds > 0 else 0.0


def steady(step_seconds: Sequence[float], samples: Sequence[int] | int, warmup: int = WARMUP_STEPS,
           windows: int = WINDOWS) -> SteadySpeed:
    """The steady speed of one run from each step's seconds and samples (an int: the same every step)."""
    seconds = [float(s) for s in step_seconds]
    sizes = [int(samples)] * len(seconds) if isinstance(samples, int) else [int(b) for b in samples]
    if len(sizes) != len(seconds):
        raise HetlabError(f"steady(): {len(seconds)} step times but {len(sizes)} batch sizes: give one each.")
    if warmup < 0 or windows < 1:
        raise HetlabError(f"steady(): warmup={warmup}, windows={windows}: give warmup ≥ 0 and windows ≥ 1.")
    timed = len(seconds) - warmup
    if timed < windows:
        raise HetlabError(f"steady(): {len(seconds)} steps leave {max(timed, 0)} after {warmup} warm-up "
                          f"steps, fewer than {windows} windows: run more steps.")
    cuts = window_cuts(timed, windows, start=warmup)
    rates = tuple(samples_per_s(sum(sizes[a:b]), sum(seconds[a:b])) for a, b in zip(cuts, cuts[1:]))
    return SteadySpeed(samples_per_s=statistics.median(rates), low=min(rates), high=max(rates), windows=rates,
                       steps=timed, warmup_steps=warmup, warmup_s=sum(seconds[:warmup]))


def window_cuts(timed: int, windows: int, start: int = 0) -> list[int]:
    """The ``windows + 1`` step indices where windows of (nearly) equal step counts begin and end among
    ``timed`` steps from step ``start``."""
    return [start + round(i * timed / windows) for i in range(windows + 1)]
