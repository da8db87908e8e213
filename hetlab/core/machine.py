"""What this machine runs: host, OS, accelerator, versions, hetlab's commit, MNIST checksums (notebooks
00 and 04). ``hetlab.cluster`` runs ``facts`` on every node; ``hetlab doctor`` compares them with the head's.
"""
from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata

from hetlab.core.samecode import code_here
from hetlab.vocab import ORIGIN_ENV


def kernel_id() -> str:
    """The OS kernel's boot id on Linux (containers of one box share it), else the host name: workers
    with one ``kernel_id`` share cores, whatever machine each stands for."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def origin_label() -> str | None:
    """``HETLAB_ORIGIN``: where this host's figures come from when it is not one of the learner's own
    machines (e.g. "a Linux host playing the Mac"); None on the learner's own machine."""
    return os.environ.get(ORIGIN_ENV) or None


def patience(seconds: float) -> float:
    """A window for work to start on a Ray node, grown with this machine's load: ``seconds`` × twice
    the 1-minute load average per core, at least 1×, at most 10×."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 0.5
    return seconds * min(max(1.0, 2 * per_core), 10.0)


def _run(*cmd: str) -> str:
    """A command's output, "" when it fails or takes more than 5 s."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def accelerator() -> str:
    """The accelerator torch can use here: CUDA card name, Apple chip (MPS), or "none"."""
    import torch
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA)"
    if torch.backends.mps.is_available():
        return f"{_run('sysctl', '-n', 'machdep.cpu.brand_string') or 'Apple GPU'} (MPS)"
    return "none"


@functools.lru_cache(maxsize=1)
def hetlab_commit() -> str | None:
    """The git commit hetlab runs from, or None (``samecode.code_here``)."""
    return code_here()["commit"]


def facts() -> dict:
    """What this process's machine runs: hardware, builds, versions, hetlab's commit, the MNIST files'
    checksums, and where its figures come from (``origin``)."""
    import psutil
    import torch

    import hetlab
    from hetlab.core import data
    system = platform.system()
    os_name = f"macOS {platform.mac_ver()[0]}" if system == "Darwin" else f"{system} {platform.release()}"
    mnist = data.checksums()
    uv = system == "Darwin" or os.environ.get("GLOO_DEVICE_TRANSPORT") == "UV"   # gloo's UV never meets Linux's TCP
    found = {"hostname": socket.gethostname(), "os": f"{os_name} {platform.machine()}",
             "cpus": os.cpu_count(), "accelerator": accelerator(),
             "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
             "python": platform.python_version(),
             "ray": metadata.version("ray"),  # read from its metadata: the basic layer imports no Ray
             "torch": torch.__version__, "hetlab": hetlab.__version__, "hetlab_commit": hetlab_commit(),
             "gloo": "UV" if uv else "TCP", "mnist": data.checksum_status(mnist), "mnist_sha256": mnist,
             "cuda": torch.version.cuda, "driver": None, "gpu_memory_gb": None,
             "origin": origin_label() or "pair"}
    if torch.cuda.is_available():
        found["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        found["driver"] = _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") or None
    return found
