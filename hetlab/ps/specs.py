"""What a parameter-server run is (notebooks 05, 08): its workers (``WorkerSpec``), where each runs
(``actor_options``), and how it
trains (``Options``: one frozen object, checked once, saved whole in every checkpoint, so no list of
keys is kept by hand anywhere). What a session does around the steps (a progress bar, automatic
checkpoints, the split that follows the machine) is not here: those are hooks (``hetlab.ps.hooks``).
Every check refuses a bad worker, batch size or option in one line before any actor starts."""
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


@dataclass(frozen=True)
class Options:
    """How a parameter-server run trains: checked once, saved whole in every checkpoint (notebooks 05, 08).

    ``"sync"``: all workers compute on the same weights, the server combines Σ (b_i/Σb)·g_i and steps.
    ``"async"``: each gradient applied as it arrives (scaled b_i/mean b), a fast worker made to WAIT
    (never discarded) so staleness ≤ ``max_staleness``. ``"local_sgd"``: H Adam steps per worker, then
    the server applies the samples-weighted mean delta; one step = one such round.
    Local SGD's H, like the batch sizes, is each worker's share of the work: its one home is the
    worker's ``Member`` (``ParameterServerTraining(local_steps=...)``, ``set_local_steps``)."""

    mode: str = "sync"                  # "sync" | "async" | "local_sgd"
    lr: float = 1e-3                    # the server's optimizer (local SGD: the workers' inner Adam)
    optimizer: str = "adam"             # the server's, in sync and async modes: "adam" | "sgd"
    max_staleness: int = 2              # async: the most updates a gradient may be late
    transfer: str = "fp32"              # gradients / deltas on the wire
    seed: int = 0                       # initial weights and the shuffled order

    def __post_init__(self):
        if self.mode not in MODES:
            raise HetlabError(f"unknown mode {self.mode!r}: use one of {MODES}.")
        if self.optimizer not in OPTIMIZERS:
            raise HetlabError(f"unknown optimizer {self.optimizer!r}: use one of {OPTIMIZERS}.")
        if self.transfer not in TRANSFERS:
            raise HetlabError(f"unknown transfer dtype {self.transfer!r}: use one of {TRANSFERS}.")
        check_count("max_staleness", self.max_staleness, 0)
        check_positive("lr", self.lr)


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
    """Local SGD's H: one whole number ≥ 1 for every worker, or one per worker (speed-scaled,
    notebook 08); returns the per-worker list."""
    many = isinstance(local_steps, (list, tuple))
    values = list(local_steps) if many else [local_steps] * n_workers
    if many and len(values) != n_workers:
        raise HetlabError(f"got {len(values)} local_steps for {n_workers} workers: give one per worker, or one H for all.")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise HetlabError(f"local_steps must be a whole number ≥ 1 (or one per worker), got {local_steps!r}.")
    return values


# Where a worker runs: the Ray actor options that pin it to its machine by role, and ask Ray for the
# GPU where it uses one, so that Ray keeps other GPU work off the card. Refused in one line before any
# actor starts: a GPU worker without a role on several machines.

def actor_options(spec: WorkerSpec) -> dict:
    """Actor options pinning a worker to its machine; a GPU worker asks Ray for the GPU.

    ``device="cuda"``/``"mps"`` always asks for it (so Ray accounts for the card and
    keeps other GPU work off it), and on a cluster of several machines needs a role (Ray
    reports the Mac's GPU as ``GPU: 1`` too); ``"auto"`` asks when the worker's node has a GPU.
    """
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
