"""A machine's steady speed at the course's batch, for its saved figures (notebook 02, the report).

``devices.steady_throughput`` on the course's model: the warm-up at the new shape (cudnn's search,
MPS's compile) timed apart, then ``windows`` windows of ``steps`` steps, read by
``hetlab.arithmetic.steady`` as a median with the slowest and fastest beside it.
"""
from __future__ import annotations

from hetlab.arithmetic.steady import WINDOWS, SteadySpeed
from hetlab.core import devices
from hetlab.core.models import make_model

COURSE_BATCH = 128


def course_speed(device=None, model: str = "small", batch_size: int = COURSE_BATCH, steps: int = 10,
                 windows: int = WINDOWS) -> SteadySpeed:
    """Samples/s of the course's ``model`` on ``device`` at ``batch_size``: ``windows`` windows of
    ``steps`` steps each, after the warm-up (timed apart, left out)."""
    return devices.steady_throughput(make_model(model, seed=0), device, batch_size, steps=steps * windows,
                                     windows=windows)
