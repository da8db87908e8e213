"""What this machine runs: host, OS, accelerator, versions, hetlab's commit, MNIST checksums
(notebooks 00 and 04).

``hetlab.cluster.nodes()`` runs ``local_report`` on every node, so each row of the node table
is what that node really has; ``hetlab doctor`` (``hetlab.tools.doctor.preflight``) compares this machine's
report with the head's.
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


def this_machine() -> str:
    """What tells one machine's processes from another's: the running kernel's boot id on Linux
    (network namespaces and containers of one box share it, and share its cores), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def origin_label() -> str | None:
    """Where this host's figures come from when it is not one of the learner's own machines: the plain
    label ``HETLAB_ORIGIN`` that whatever runs it sets from outside (e.g. "a Linux host playing the
    Mac"), which every label a learner sees carries (the node table, a worker's line, the saved
    figures, the report); None on the learner's own machine, where nothing sets it."""
    return os.environ.get(ORIGIN_ENV) or None


def patience(seconds: float) -> float:
    """A window for work to start on a Ray node, grown with this machine's load: ``seconds`` ×
    twice the 1-minute load average per core, at least 1×, at most 10×. A busy box starts Ray's
    worker processes later, not never, and the processes that start at once share what is left."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 0.5
    return seconds * min(max(1.0, 2 * per_core), 10.0)


def accelerator() -> str:
    """The accelerator torch can use here: CUDA card name, Apple chip (MPS), or "none"."""
    import torch
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA)"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return f"{_apple_chip()} (MPS)"
    return "none"


def _apple_chip() -> str:
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "Apple GPU"
    except (OSError, subprocess.SubprocessError):
        return "Apple GPU"


@functools.lru_cache(maxsize=1)
def hetlab_commit() -> str | None:
    """The git commit hetlab runs from (``samecode.code_here``), or None when it is not a git
    checkout or git does not answer within 5 s."""
    return code_here()["commit"]


def local_report() -> dict:
    """What this process's machine runs: host, OS, CPUs, accelerator, memory, versions,
    hetlab's version and git commit, and the MNIST files' checksums.

    ``hetlab.cluster.nodes()`` runs this on every node, so each row is what that
    node really has, not what the driver assumes; ``hetlab doctor --head`` compares
    this machine's report with the head's (``compare_versions``).
    """
    from hetlab.core import data
    mnist = data.checksums()
    return {**_basics(), "mnist": data.checksum_status(mnist), "mnist_sha256": mnist}


def _basics() -> dict:
    """Host, OS, CPUs, accelerator, memory, versions and hetlab's commit: ``local_report`` and ``facts``."""
    import psutil
    import torch

    import hetlab
    system = platform.system()
    os_name = f"macOS {platform.mac_ver()[0]}" if system == "Darwin" else f"{system} {platform.release()}"
    return {"hostname": socket.gethostname(), "os": f"{os_name} {platform.machine()}",
            "cpus": os.cpu_count(), "accelerator": accelerator(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(),
            "ray": metadata.version("ray"),  # read from its metadata: the basic layer imports no Ray
            "torch": torch.__version__, "hetlab": hetlab.__version__, "hetlab_commit": hetlab_commit(),
            "gloo": gloo_transport(system)}


def gloo_transport(system: str) -> str:
    """The transport this machine's gloo speaks: UV on macOS, TCP on Linux (PyTorch builds one of
    them per system, and the two never meet); UV too where ``GLOO_DEVICE_TRANSPORT=UV`` makes a Linux
    node play the Mac (the practice cluster's "mac", or any Linux host playing it)."""
    return "UV" if system == "Darwin" or os.environ.get("GLOO_DEVICE_TRANSPORT") == "UV" else "TCP"


def _run(*cmd: str) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def wsl_build() -> str | None:
    """The Windows build under WSL2 (``cmd.exe /c ver``), None outside WSL (the report's machine table)."""
    try:
        with open("/proc/version", encoding="ascii", errors="replace") as f:
            if "microsoft" not in f.read().lower():
                return None
    except OSError:
        return None
    return _run("cmd.exe", "/c", "ver") or "WSL2 (Windows build unknown)"


def facts() -> dict:
    """This machine's basics (``local_report`` less MNIST) and what the report's machine table adds,
    read on each node by ``hetlab.cluster.figures``: GPU memory, driver, CUDA or MPS build, WSL build."""
    import torch
    report = _basics()
    extra = {"chip": platform.processor() or platform.machine(), "wsl": wsl_build(),
             "cuda": torch.version.cuda, "mps": None, "driver": None, "gpu_memory_gb": None,
             "origin": origin_label() or "pair"}
    if torch.cuda.is_available():
        extra["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        extra["driver"] = _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") or None
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        extra["mps"] = f"available (torch {torch.__version__}, macOS {platform.mac_ver()[0]})"
        extra["chip"] = _apple_chip()
    return {**report, **extra}
