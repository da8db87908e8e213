"""What a parameter-server worker is (notebook 05): ``WorkerSpec`` (asked for) and ``WorkerInfo``
(what it reported when it started), and the checks that refuse a bad worker or batch size in one
line before any actor starts. Plain data, no Ray."""
from __future__ import annotations

import math
from dataclasses import dataclass

from hetlab.errors import HetlabError
from hetlab.core.simulate import labelled
from hetlab.vocab import DEVICE_KINDS, PRECISIONS


@dataclass
class WorkerSpec:
    """What one worker is: a name, where it runs, which device, how fast, which precision."""

    name: str
    role: str | None = None      # pins to a node via hetlab.cluster.placement(role)
    device: str = "auto"         # resolved ON the worker's own node
    slowdown: float = 1.0        # > 1: simulated slower device
    precision: str = "fp32"      # "fp32" | "bf16" | "fp16" (autocast where supported)

    @property
    def label(self) -> str:
        """The learner-facing name: always says "simulated" for a slowed-down worker."""
        return labelled(self.name, self.slowdown)


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker reported when it started (``Worker.info``: a plain dict on the wire)."""

    node_id: str
    device: str                  # the torch device it resolved on its own machine
    precision: str               # what autocast really uses there ("fp32" on the CPU)
    machine: str                 # its kernel's id (``hetlab.core.machine.this_machine``): workers sharing cores
    device_note: str = ""        # e.g. Ray gave it another GPU than asked
    origin: str | None = None    # its host's origin label, if it plays a machine (core.machine.origin_label)


def check_spec(spec) -> None:
    """Reject a malformed WorkerSpec with one line saying what to change."""
    if not all(hasattr(spec, a) for a in ("name", "role", "device", "slowdown", "precision")):
        raise HetlabError(f"workers must be WorkerSpec(...) objects, got {type(spec).__name__}.")
    if not isinstance(spec.name, str) or not spec.name:
        raise HetlabError("every worker needs a non-empty name, e.g. WorkerSpec('desktop').")
    if not isinstance(spec.slowdown, (int, float)) or not math.isfinite(spec.slowdown) \
            or spec.slowdown < 1:
        raise HetlabError(f"worker {spec.name!r}: slowdown must be a number ≥ 1, got {spec.slowdown!r}.")
    device = str(spec.device)
    kind, colon, index = device.partition(":")
    if device != "auto" and (kind not in DEVICE_KINDS or (colon and not index.isdigit())):
        raise HetlabError(f"worker {spec.name!r}: unknown device {device!r}; use 'auto', "
                          f"'cuda', 'cuda:N', 'mps' or 'cpu' (resolved on the worker's machine).")
    if spec.precision not in PRECISIONS:
        raise HetlabError(f"worker {spec.name!r}: unknown precision {spec.precision!r}; use one of {PRECISIONS}.")


def check_batch_sizes(sizes, n: int) -> list[int]:
    """One whole number ≥ 1 per worker, or a HetlabError."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise HetlabError(f"batch sizes {sizes!r} must be a list with one whole number per worker.")
    if len(sizes) != n:
        raise HetlabError(f"got {len(sizes)} batch sizes for {n} workers: give one per worker.")
    out = []
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or s != int(s) or s < 1:
            raise HetlabError(f"batch size {s!r} is invalid: every batch size must be a whole number ≥ 1.")
        out.append(int(s))
    return out
