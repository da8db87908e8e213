"""Which accelerators this machine has and what they are (notebooks 00, 02): ``cuda`` (an NVIDIA card),
``mps`` (an Apple Silicon GPU) or ``cpu``. GPU work is asynchronous: a timer must ``synchronize``.
"""
from __future__ import annotations

import platform

import torch

from hetlab.errors import HetlabError
from hetlab.vocab import DEVICE_KINDS


def available() -> list[str]:
    """Device kinds usable in this process, fastest first, e.g. ``["cuda", "cpu"]``."""
    found = ["cuda"] if torch.cuda.is_available() else []
    if torch.backends.mps.is_available():
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
        dev = None
    if dev is None or dev.type not in DEVICE_KINDS:
        raise HetlabError(f"unknown device {device!r}: use one of {DEVICE_KINDS} or 'auto'.")
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
    """Name, memory and compute capability of one device."""
    dev = resolve(device)
    info = {"device": str(dev), "kind": dev.type, "name": None, "memory_gb": None, "capability": None}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=props.name, memory_gb=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}")
    elif dev.type == "mps":   # the machine's unified memory; PyTorch does not name the chip
        info.update(name=f"Apple {platform.machine()} GPU (MPS)",
                    memory_gb=round(torch.mps.recommended_max_memory() / 2**30, 1))
    else:
        info.update(name=platform.processor() or platform.machine(),
                    capability=f"{torch.get_num_threads()} threads")
    return info


def synchronize(device: str | torch.device) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()
