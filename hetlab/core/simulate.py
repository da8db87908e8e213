"""A *simulated* slower device, and how it is labelled wherever a learner sees it (notebooks 05–08).

The practice cluster's "mac" is this machine's CPU made N× slower: after each real computation the
worker sleeps (N − 1) × that work's typical time here, so its samples/s is 1/N. The same sleep
stands for a throttling laptop (notebook 06); every label of such a worker says "simulated N× slower".
"""
from __future__ import annotations

import statistics
import time
from collections import deque

# Typical = the median of the last RECENT timings, not this one: a hiccup here (another process taking
# the core for 20 ms) slept again N − 1 times would cost N × 20 ms, where a real slower device loses it once.
RECENT = 5


class SlowDevice:
    """This machine's device made ``slowdown``× slower (``slowdown`` 1: as it is).

    ``after(work, compute_s)`` follows every real computation: ``work`` names what was computed
    (e.g. its batch size), ``compute_s`` is how long it took. It sleeps (slowdown − 1) × the median
    of the last ``RECENT`` timings of that work and returns the seconds slept.
    """

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
    """A device's time on one piece of work: its compute + the sleep of a simulated slower device;
    the one place the two are added (``hetlab.ps.records``, ``hetlab.core.train``)."""
    return compute_s + simulated_s


def labelled(text: str, slowdown: float) -> str:
    """``text`` as a learner sees it: ``"mac (simulated 4× slower)"`` for a simulated device,
    ``text`` alone for a real one (``slowdown`` 1). The one label format of every worker."""
    return f"{text} (simulated {slowdown:g}× slower)" if slowdown > 1 else text
