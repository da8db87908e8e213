"""A machine's steady speed at the course's batch, for its saved figures (notebook 02, the report).

The warm-up (the first steps at a new shape: cudnn's search, MPS's compile) is timed apart, then
``windows`` runs of ``steps`` training steps each give one samples/s; ``hetlab.arithmetic.steady``
reads them as a median with the slowest and fastest beside it.
"""
from __future__ import annotations

import time

from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, SteadySpeed, steady
from hetlab.core import devices
from hetlab.core.models import make_model

COURSE_BATCH = 128


def course_speed(device=None, model: str = "small", batch_size: int = COURSE_BATCH, steps: int = 10,
                 windows: int = WINDOWS) -> SteadySpeed:
    """Samples/s of the course's ``model`` on ``device`` at ``batch_size``: ``windows`` timed windows
    of ``steps`` steps after ``WARMUP_STEPS`` warm-up steps (timed apart, left out)."""
    net = make_model(model, seed=0)
    t0 = time.perf_counter()
    devices.throughput(net, device, batch_size, steps=WARMUP_STEPS, warmup=0)
    warm = time.perf_counter() - t0
    rates = [devices.throughput(net, device, batch_size, steps=steps, warmup=0) for _ in range(windows)]
    per_step = [[batch_size / r] * steps for r in rates]
    seconds = [warm / WARMUP_STEPS] * WARMUP_STEPS + [s for window in per_step for s in window]
    return steady(seconds, batch_size, warmup=WARMUP_STEPS, windows=windows)
