"""``hetlab gpu-check``: the course's CUDA claims on the learner's own card (README "Check a real NVIDIA
GPU"). ``claims`` runs them (re-exported here); ``device`` holds the checks on one device and ``report``
the rows, the table and what the check ran on.
"""
from hetlab.tools.gpucheck.claims import (  # noqa: F401 - re-exported
    CHECKS, select, require_cuda, run)
