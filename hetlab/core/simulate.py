"""A *simulated* slower device (notebooks 05–08): after each real computation the worker sleeps
(N − 1) × that work's typical time, so its samples/s is 1/N; every label of it says so.
"""
from __future__ import annotations

import statistics
import time
from collections import deque

# Typical = the median of the last RECENT timings: a hiccup here is not slept again N − 1 times.
RECENT = 5


class SlowDevice:
    """This machine's device made ``slowdown``× slower: ``after(work, compute_s)`` follows every real
    computation of ``work`` (e.g. a batch size) and sleeps (slowdown − 1) × its typical time; returns it."""

    def __init__(self, slowdown: float = 1.0):
        self.slowdown = float(slowdown)
        self._recent: dict = {}  # work → its last RECENT timings

    def after(self, work, compute_s: float) -> float:
        times = self._recent.setdefault(work, deque(maxlen=RECENT))
        times.append(compute_s)
        extra = max(0.0, (self.slowdown - 1.0) * statistics.median(times))
        if extra > 0:
            time.sleep(extra)
        return extra


def device_seconds(compute_s: float, simulated_s: float) -> float:
    """A device's time on one piece of work: compute + a simulated device's sleep, added here only."""
    return compute_s + simulated_s


def labelled(text: str, slowdown: float) -> str:
    """``"mac (simulated 4× slower)"`` for a simulated device, ``text`` alone for a real one."""
    return f"{text} (simulated {slowdown:g}× slower)" if slowdown > 1 else text
