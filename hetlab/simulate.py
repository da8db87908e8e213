"""A *simulated* slower device, and how it is labelled wherever a learner sees it (notebooks 05–08).

The practice cluster's "mac" is this machine's CPU made N× slower: after each real
computation the worker sleeps (N − 1) × the time it took, so its samples/s is exactly
1/N of what it would be. The same sleep stands for a throttling laptop (notebook 06).
Every label of such a worker says "simulated N× slower".
"""
from __future__ import annotations

import time


def slow_down(slowdown: float, compute_s: float) -> float:
    """Sleep (slowdown − 1) × ``compute_s``; returns the seconds slept (0 at slowdown 1)."""
    extra = max(0.0, (slowdown - 1.0) * compute_s)
    if extra > 0:
        time.sleep(extra)
    return extra


def labelled(text: str, slowdown: float) -> str:
    """``text`` as a learner sees it: ``"mac (simulated 4× slower)"`` for a simulated device,
    ``text`` alone for a real one (``slowdown`` 1). The one label format of every worker."""
    return f"{text} (simulated {slowdown:g}× slower)" if slowdown > 1 else text
