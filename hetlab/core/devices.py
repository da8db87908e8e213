"""Which accelerators this machine has and what they are (notebooks 00, 02); how fast one trains
is ``hetlab.core.train.measure_speed``.

PyTorch names three device kinds that matter here: ``cuda`` (an NVIDIA card),
``mps`` (the GPU of an Apple Silicon Mac) and ``cpu``. GPU work is asynchronous:
a timer must wait for the device (``synchronize``) or it measures only the launch.
"""
from __future__ import annotations

import platform

import torch

from hetlab.errors import HetlabError

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
