"""``hetlab gpu-check``: the course's CUDA claims on a real NVIDIA card (docs/gpu-machine.md).
``claims`` runs them (re-exported here); ``context`` sizes them, ``device`` times one device, ``pair``
the card beside the CPU, ``autocast`` mixed precision and ``report`` prints the table.
"""
from hetlab.tools.gpucheck.claims import (  # noqa: F401 - re-exported
    CHECKS, select, require_cuda, run)
