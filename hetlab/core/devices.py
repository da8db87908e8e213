"""Which accelerators this machine has, what they are, and how fast they train (notebooks 00, 02).

PyTorch names three device kinds that matter here: ``cuda`` (an NVIDIA card),
``mps`` (the GPU of an Apple Silicon Mac) and ``cpu``. GPU work is asynchronous:
a timer must wait for the device (``synchronize``) or it measures only the launch.
"""
from __future__ import annotations

import dataclasses
import platform
import time

import torch
from torch import nn

from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, SteadySpeed, steady, window_cuts
from hetlab.errors import HetlabError
from hetlab.arithmetic.estimates import COURSE_BATCH
from hetlab.core import simulate
from hetlab.core.models import make_model
from hetlab.core.train_step import make_optimizer, train_step

KINDS = ("cuda", "mps", "cpu")


def available() -> list[str]:
    """Device kinds usable in this process, fastest first, e.g. ``["cuda", "cpu"]``."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def best() -> str:
    """The fastest available kind: cuda, then mps, then cpu."""
    return available()[0]


def resolve(device: str | torch.device | None = None) -> torch.device:
    """Turn ``None``/``"auto"``/``"cuda:1"``/… into a usable ``torch.device``, or explain why not."""
    if device is None or device == "auto":
        return torch.device(best())
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise HetlabError(f"unknown device {device!r}: use one of {KINDS} or 'auto'.") from None
    if dev.type not in KINDS:
        raise HetlabError(f"unknown device {device!r}: use one of {KINDS} or 'auto'.")
    if dev.type not in available():
        raise HetlabError(
            f"device {dev.type!r} is not available on this machine (found {available()}): "
            f"pick one of those or 'auto'."
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise HetlabError(f"device {str(dev)!r} is not visible here: this process sees "
                          f"{torch.cuda.device_count()} CUDA device(s), cuda:0 first; use 'cuda' or 'auto'.")
    return dev


def describe(device: str | torch.device | None = None) -> dict:
    """Name, memory, compute capability and half-precision support of one device."""
    dev = resolve(device)
    info = {"device": str(dev), "kind": dev.type, "name": None, "memory_gb": None,
            "capability": None, "bf16": False, "fp16": False}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=props.name, memory_gb=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}",
                    bf16=bool(torch.cuda.is_bf16_supported()), fp16=True)
    elif dev.type == "mps":
        # Apple GPUs share the machine's unified memory; PyTorch does not expose the chip name.
        info.update(name=f"Apple {platform.machine()} GPU (MPS)", fp16=True,
                    bf16=_mps_bf16_supported())
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is not None:
            info["memory_gb"] = round(recommended() / 2**30, 1)
    else:
        info.update(name=platform.processor() or platform.machine(),
                    capability=f"{torch.get_num_threads()} threads", bf16=True)
    return info


def _mps_bf16_supported() -> bool:
    """bf16 on MPS needs macOS 14+; ask by trying a tiny tensor."""
    try:
        torch.ones(1, device="mps", dtype=torch.bfloat16)
        return True
    except (RuntimeError, TypeError):
        return False


def synchronize(device: str | torch.device) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


# Batch shapes (with whatever else decides the kernels) already run in this process.
_WARM: set = set()


def warm_up(key, step, device: str | torch.device) -> bool:
    """Run ``step()`` once, untimed, the first time ``key`` (a batch shape, device, model) is seen here.

    MPS compiles a graph per shape, so a first step at a new batch size is many times slower: timed,
    the Mac would look slower and the tuner give it less work. CUDA does first-time work per shape too;
    on the CPU it is cheap, so one rule for every device."""
    if key in _WARM:
        return False
    step()
    synchronize(device)
    _WARM.add(key)
    return True


def shape_key(model: nn.Module, device: str | torch.device, batch_size: int, *extra) -> tuple:
    """What makes a step's kernels new: device, the model's layers (not its weights), batch size."""
    return (str(torch.device(device)), repr(model), int(batch_size), *extra)


# hetlab trains with Adam (train.py, the parameter server's workers and server, Ray Train), so
# Adam is what notebook 02 measures.
TRAINING_OPTIMIZER = "adam"


def throughput(model: nn.Module, device: str | torch.device | None = None,
               batch_size: int = 128, steps: int = 10, data=None, loss=None) -> float:
    """Training samples per second of ``model`` on ``device`` at ``batch_size`` (random data), in steady state:
    whole training steps (forward, backward, an Adam update, as hetlab trains), the device synchronised at
    each timed window's end, after ``WARMUP_STEPS`` untimed steps the first time this process runs these
    layers at this batch size on this device (MPS compiles per shape). Your own model: ``data=(x, y)`` and
    ``loss``. The median of the windows (``steady_throughput``: the windows and the warm-up's seconds)."""
    return steady_throughput(model, device, batch_size, steps, data=data, loss=loss).samples_per_s


def steady_throughput(model: nn.Module, device: str | torch.device | None = None,
                      batch_size: int = 128, steps: int = 10, warmup: int | None = None,
                      data=None, loss=None, windows: int = WINDOWS) -> SteadySpeed:
    """``throughput``'s measurement whole (``hetlab.arithmetic.steady``): the steady samples/s (the median of
    ``windows`` windows of the ``steps`` timed steps, fewer windows if fewer steps), their range, and the
    warm-up's steps and seconds, timed apart and left out. ``warmup``: None, the rule above; an int, that
    many steps every time (the benchmarks, which time one shape again and again)."""
    if batch_size < 1 or steps < 1:
        raise HetlabError(f"batch_size and steps must be at least 1 (got {batch_size}, {steps}).")
    dev = resolve(device)
    model = model.to(dev)
    opt = make_optimizer(TRAINING_OPTIMIZER, model.parameters(), lr=1e-3)
    if data is None:
        x = torch.randn(batch_size, 1, 28, 28, device=dev)
        y = torch.randint(0, 10, (batch_size,), device=dev)
    else:
        idx = torch.arange(batch_size) % len(data[1])
        x, y = data[0][idx.to(data[0].device)], data[1][idx.to(data[1].device)]
        x, y = (x.float() if x.is_floating_point() else x).to(dev), y.to(dev)  # MPS has no float64
    loss = loss or nn.functional.cross_entropy
    key = shape_key(model, dev, batch_size, TRAINING_OPTIMIZER)
    if warmup is None:
        warmup = 0 if key in _WARM else WARMUP_STEPS
    synchronize(dev)
    warm = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        train_step(model, opt, loss, x, y)
        synchronize(dev)
        warm.append(time.perf_counter() - t0)
    if warmup > 0:
        _WARM.add(key)
    n = max(1, min(windows, steps))
    cuts = window_cuts(steps, n)
    spans = []
    for a, b in zip(cuts, cuts[1:]):
        t0 = time.perf_counter()
        for _ in range(b - a):
            train_step(model, opt, loss, x, y)
        synchronize(dev)
        spans.append(time.perf_counter() - t0)
    sizes = [batch_size] * warmup + [batch_size * (b - a) for a, b in zip(cuts, cuts[1:])]
    return dataclasses.replace(steady(warm + spans, sizes, warmup=warmup, windows=n), steps=steps)


def course_speed(device=None, steps: int = 10) -> SteadySpeed:
    """The course's model's steady samples/s at the course's batch on ``device``, with its spread: ``WINDOWS``
    windows of ``steps`` steps after the warm-up (timed apart, left out). What notebook 02 saves for the report."""
    return steady_throughput(make_model("small", seed=0), device, COURSE_BATCH, steps=steps * WINDOWS)


def timed_steps(step, device: str | torch.device, steps: int, key, slow=None) -> tuple[float, int]:
    """Seconds ``steps`` calls of ``step()`` take on ``device``, and how many untimed warm-up steps ran first
    (one, only if ``key`` is new to this process: ``warm_up``). A parameter-server worker timing itself alone
    (notebook 05): without ``slow`` the steps are one synchronised run; with a ``hetlab.core.simulate.SlowDevice``
    each step is timed to its end and followed by the simulated device's wait, which is counted."""
    warmups = int(warm_up(key, step, device))
    synchronize(device)
    if slow is None:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        return time.perf_counter() - t0, warmups
    total = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        synchronize(device)
        compute_s = time.perf_counter() - t0
        total += simulate.device_seconds(compute_s, slow.after(key, compute_s))
    return total, warmups


def alternated(measures: dict, rounds: int = 5) -> dict:
    """Each of ``measures`` (name → a function returning a figure, e.g. samples/s) called ``rounds``
    times in turn, the order reversed every other round; each one's median. Other work on the
    machine, or a laptop slowing as it warms, then weighs on every side alike: how notebooks 01
    and 02 compare timings."""
    import statistics
    runs: dict = {name: [] for name in measures}
    for r in range(rounds):
        for name in (list(measures) if r % 2 == 0 else list(measures)[::-1]):
            runs[name].append(measures[name]())
    return {name: statistics.median(values) for name, values in runs.items()}
