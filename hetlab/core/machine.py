"""What this machine runs: host, OS, accelerator, versions, hetlab's commit, MNIST checksums
(notebooks 00 and 04).

``hetlab.cluster.ray_cluster.nodes()`` runs ``local_report`` on every node, so each row of the node table
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


def this_machine() -> str:
    """What tells one machine's processes from another's: the running kernel's boot id on Linux
    (network namespaces and containers of one box share it, and share its cores), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


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

    ``hetlab.cluster.ray_cluster.nodes()`` runs this on every node, so each row is what that
    node really has, not what the driver assumes; ``hetlab doctor --head`` compares
    this machine's report with the head's (``compare_versions``).
    """
    import psutil
    import torch

    import hetlab
    from hetlab.core import data
    system = platform.system()
    os_name = f"macOS {platform.mac_ver()[0]}" if system == "Darwin" else f"{system} {platform.release()}"
    mnist = data.checksums()
    return {"hostname": socket.gethostname(), "os": f"{os_name} {platform.machine()}",
            "cpus": os.cpu_count(), "accelerator": accelerator(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(),
            "ray": metadata.version("ray"),  # read from its metadata: the basic layer imports no Ray
            "torch": torch.__version__, "hetlab": hetlab.__version__,
            "hetlab_commit": hetlab_commit(), "mnist": data.checksum_status(mnist),
            "mnist_sha256": mnist}
