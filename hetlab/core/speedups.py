"""Options that may make one device train the course's model faster (notebook 01, ``hetlab gpu-check``).

All off by default and **not yet measured on a card**: a GPU run decides which become the default.
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

NOT_MEASURED = "not yet measured on a card: off by default"


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
