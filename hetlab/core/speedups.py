"""Options that may make one device train the course's model faster (notebook 01, ``hetlab gpu-check``).

Off unless a card's run picks them: ``decide`` keeps an option of gpu-check's rows only when it is faster
warm and within ``ACCURACY_POINTS`` of the plain loop's accuracy; ``on_device``: what ``train`` uses.
``fused``: one fused Adam kernel instead of a loop over the parameters (CUDA, MPS, CPU).
``tf32``: TF32 matmuls and convolutions plus ``cudnn.benchmark`` (CUDA only; elsewhere nothing).
``bf16``: bf16 autocast around forward and loss. ``cuda_graphs``: ``torch.compile(mode="reduce-overhead")``,
which replays the step's kernels as CUDA graphs (CUDA only; its compile time counts in the run's time).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch

from hetlab.errors import HetlabError

ACCURACY_POINTS = 0.2   # an option may cost at most this many points of test accuracy (issue 60)


@dataclass(frozen=True)
class Speedups:
    """Which speed-ups one training run uses; ``Speedups()`` is the plain loop."""

    fused: bool = False
    tf32: bool = False
    bf16: bool = False
    cuda_graphs: bool = False

    @property
    def names(self) -> list[str]:
        """The options turned on, e.g. ``["fused", "bf16"]``; empty for the plain loop."""
        return [f.name for f in fields(self) if getattr(self, f.name)]

    def check(self, device: torch.device) -> None:
        """A clear error, before anything runs, for an option this device cannot take."""
        if self.cuda_graphs and device.type != "cuda":
            raise HetlabError(f"cuda_graphs needs a CUDA device, not {device.type}: leave it off there.")

    def optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        """Adam, fused when asked (one kernel for every parameter)."""
        return torch.optim.Adam(params, lr=lr, fused=True) if self.fused else torch.optim.Adam(params, lr=lr)

    def autocast(self, device: torch.device):
        """bf16 autocast on ``device`` when asked, else nothing (fp32)."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model to call in each step: compiled for CUDA graphs when asked (the same weights)."""
        return torch.compile(model, mode="reduce-overhead") if self.cuda_graphs else model

    @contextlib.contextmanager
    def backend(self, device: torch.device):
        """TF32 and cudnn.benchmark on a CUDA device for the run, the previous settings restored after."""
        if not (self.tf32 and device.type == "cuda"):
            yield
            return
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                 torch.backends.cudnn.benchmark)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        try:
            yield
        finally:
            (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark) = saved


PLAIN = Speedups()
def decide(rows) -> tuple[Speedups, dict[str, str]]:
    """The options gpu-check's rows justify, and why each row was or was not taken.

    ``rows``: gpu-check's ``train_128_*`` rows as in its JSON record (``name``, ``figure`` = samples/s,
    ``details`` with ``options``, ``steady`` and ``accuracy``). A row counts only when it was timed warm
    (``steady``: the warm-up apart) and has its accuracy; of the rows faster than ``train_128_plain`` and
    within ``ACCURACY_POINTS`` of its accuracy, the fastest wins. No plain row, or none that qualifies: PLAIN."""
    runs = {r["name"]: r for r in rows if r["name"].startswith("train_128_") and r.get("figure")}
    plain = runs.pop("train_128_plain", None)
    if plain is None:
        return PLAIN, {}
    why, best = {}, (plain["figure"], PLAIN)
    for name, row in runs.items():
        details = row.get("details") or {}
        speed, accuracy = row["figure"], details.get("accuracy")
        if "steady" not in details or accuracy is None or "accuracy" not in plain.get("details", {}):
            why[name] = "not timed warm with its accuracy: not taken"
            continue
        over, points = speed / plain["figure"], 100 * (accuracy - plain["details"]["accuracy"])
        if over <= 1.0 or points < -ACCURACY_POINTS:
            why[name] = f"{over:.2f}× the plain loop warm, {points:+.2f} pt: not taken"
            continue
        why[name] = f"{over:.2f}× the plain loop warm, {points:+.2f} pt: qualifies"
        if speed > best[0]:
            best = (speed, Speedups(**{option: True for option in details.get("options", [])}))
    return best[1], why


# What ``decide`` picks from the last card's record (docs/measured/2026-11-28-h100-gpucheck.json: its
# options rows were timed with the warm-up inside, so none counts): ``train``'s default on CUDA.
# tests/test_gpucheck.py holds it to that record; a new card record changes both.
DECIDED_ON_CUDA = PLAIN


def on_device(device: torch.device) -> Speedups:
    """The options a run on ``device`` uses unless told: ``DECIDED_ON_CUDA`` on a CUDA card, else PLAIN."""
    return DECIDED_ON_CUDA if device.type == "cuda" else PLAIN
