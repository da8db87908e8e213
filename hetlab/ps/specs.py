"""What a parameter-server run is (notebooks 05, 08): its workers (``WorkerSpec``), where each runs
(``actor_options``) and the checks of how it trains (``check_options``). Every check refuses a bad
worker, batch size or option in one line before any actor starts."""
from __future__ import annotations

import math
from dataclasses import dataclass

from hetlab.cluster.roles import live_nodes, placement
from hetlab.errors import HetlabError
from hetlab.core.simulate import labelled
from hetlab.vocab import DEVICE_KINDS, MODES, OPTIMIZERS, TRANSFERS


@dataclass
class WorkerSpec:
    """What one worker is: a name, where it runs, which device, how fast."""

    name: str
    role: str | None = None      # pins to a node via hetlab.cluster.placement(role)
    device: str = "auto"         # resolved ON the worker's own node
    slowdown: float = 1.0        # > 1: simulated slower device

    @property
    def label(self) -> str:
        """The learner-facing name: always says "simulated" for a slowed-down worker."""
        return labelled(self.name, self.slowdown)


def check_spec(spec) -> None:
    """Reject a malformed WorkerSpec with one line saying what to change."""
    if not all(hasattr(spec, a) for a in ("name", "role", "device", "slowdown")):
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


def check_options(options: dict) -> dict:
    """How a run trains (``ParameterServerTraining``'s ``mode``, ``lr``, ``optimizer``, ``max_staleness``,
    ``transfer``, ``seed``), checked in one line each; saved whole in every checkpoint."""
    if options["mode"] not in MODES:
        raise HetlabError(f"unknown mode {options['mode']!r}: use one of {MODES}.")
    if options["optimizer"] not in OPTIMIZERS:
        raise HetlabError(f"unknown optimizer {options['optimizer']!r}: use one of {OPTIMIZERS}.")
    if options["transfer"] not in TRANSFERS:
        raise HetlabError(f"unknown transfer dtype {options['transfer']!r}: use one of {TRANSFERS}.")
    check_count("max_staleness", options["max_staleness"], 0)
    check_positive("lr", options["lr"])
    return options


def check_count(name: str, value, least: int) -> int:
    """A whole number ≥ ``least`` (steps, a bound), or one line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise HetlabError(f"{name} must be a whole number ≥ {least}, got {value!r}.")
    return value


def check_positive(name: str, value) -> None:
    """A positive, finite number (a learning rate, a timeout), or one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise HetlabError(f"{name} must be a positive number, got {value!r}.")


def check_local_steps(local_steps, n_workers: int) -> list[int]:
    """Local SGD's H, one for all or one per worker: the per-worker list."""
    many = isinstance(local_steps, (list, tuple))
    values = list(local_steps) if many else [local_steps] * n_workers
    if many and len(values) != n_workers:
        raise HetlabError(f"got {len(values)} local_steps for {n_workers} workers: give one per worker, or one H for all.")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise HetlabError(f"local_steps must be a whole number ≥ 1 (or one per worker), got {local_steps!r}.")
    return values


def actor_options(spec: WorkerSpec) -> dict:
    """Actor options pinning a worker to its machine by role; a GPU worker asks Ray for the GPU (so Ray
    keeps other GPU work off it), and on several machines needs a role (the Mac reports a GPU too)."""
    kind = str(spec.device).split(":")[0]
    if kind in ("cuda", "mps") and spec.role is None and len(live_nodes()) > 1:
        raise HetlabError(f"worker {spec.name!r} asks for device={spec.device!r} but has no role: Ray "
                          f"reports a GPU on the Mac too, so on several machines it could start there; "
                          f"give it role={'desktop' if kind == 'cuda' else 'mac'!r}.")
    gpu = kind in ("cuda", "mps") or (kind == "auto" and spec.role is not None and any(
        n["Resources"].get("GPU", 0) >= 1 for n in live_nodes(spec.role)))
    if spec.role is None and not gpu:
        return {}
    return placement(spec.role, gpu=gpu)
