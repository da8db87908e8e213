"""How a parameter-server run trains: one frozen object, checked once (notebooks 05, 08).

``ParameterServerTraining(...)`` takes these as keyword arguments and keeps them as one
``Options``; a checkpoint saves it whole and ``resume`` reads it back, so no list of keys is
kept by hand anywhere. What a session does around the steps (a progress bar, automatic
checkpoints, the split that follows the machine) is not here: those are hooks
(``hetlab.ps.hooks``). A mistake is one line saying what to change (``HetlabError``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from hetlab.errors import HetlabError
from hetlab.vocab import MODES, OPTIMIZERS, TRANSFERS


@dataclass(frozen=True)
class Options:
    """How a parameter-server run trains: checked once, saved whole in every checkpoint (notebooks 05, 08).

    ``"sync"``: all workers compute on the same weights, the server combines Σ (b_i/Σb)·g_i and steps.
    ``"async"``: each gradient applied as it arrives (scaled b_i/mean b), a fast worker made to WAIT
    (never discarded) so staleness ≤ ``max_staleness``. ``"local_sgd"``: H Adam steps per worker, then
    the server applies the samples-weighted mean delta with outer SGD; one step = one such round.
    Local SGD's H, like the batch sizes, is each worker's share of the work: its one home is the
    worker's ``Member`` (``ParameterServerTraining(local_steps=...)``, ``set_local_steps``)."""

    mode: str = "sync"                  # "sync" | "async" | "local_sgd"
    lr: float = 1e-3                    # the server's optimizer (local SGD: the workers' inner Adam)
    optimizer: str = "adam"             # the server's, in sync and async modes: "adam" | "sgd"
    max_staleness: int = 2              # async: the most updates a gradient may be late
    outer_lr: float = 1.0               # local SGD: the server's outer SGD
    outer_momentum: float = 0.0         # local SGD: Nesterov momentum when > 0 (DiLoCo)
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
        for name in ("lr", "outer_lr"):
            check_positive(name, getattr(self, name))
        if not isinstance(self.outer_momentum, (int, float)) or not 0 <= self.outer_momentum < 1:
            raise HetlabError(f"outer_momentum must be in [0, 1), got {self.outer_momentum!r}.")

    def saved(self) -> dict:
        """The options as a checkpoint holds them: plain values."""
        return dataclasses.asdict(self)


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
