"""The parameter server (notebook 05): the weights as one flat fp32 buffer and their optimizer, in the
driver's process (a server actor would add a second trip per step: ``benchmarks/server_trip.py``).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Sequence

import torch
from torch import nn

from hetlab.core.flat import flat_weights
from hetlab.core.models import make_model
from hetlab.core.train import make_optimizer


def combine_coefficients(samples: Sequence[int]) -> list[float]:
    """Weights b_i / B of each worker's gradient in a synchronous step, B = Σ b_i (notebook 05)."""
    total = float(sum(samples))
    return [s / total for s in samples]


class Server:
    """The weights and their optimizer (in local SGD plain SGD at rate 1: the weights move by the
    weighted mean of the workers' changes)."""

    def __init__(self, model, seed: int, lr: float, mode: str, optimizer: str = "adam"):
        self.w = nn.Parameter(flat_weights(make_model(model, seed=seed)))
        if mode == "local_sgd":
            self.opt = torch.optim.SGD([self.w], lr=1.0)
        else:
            self.opt = make_optimizer(optimizer, [self.w], lr=lr)

    def weights(self) -> torch.Tensor:
        """A copy of the weights: one flat fp32 CPU tensor."""
        return self.w.detach().clone()

    def apply(self, grads: list[torch.Tensor], samples: list[int]) -> None:
        """Σ (b_i/B)·g_i, each gradient weighted by the samples behind it (not the plain mean,
        which over-weights a small batch, nor the sum), then one optimizer step."""
        self.step(sum(c * g.float() for c, g in zip(combine_coefficients(samples), grads)))

    def step(self, gradient: torch.Tensor) -> None:
        """One optimizer step with ``gradient`` as the weights' gradient."""
        with one_thread():
            self.w.grad = gradient
            self.opt.step()
            self.w.grad = None

    def state(self) -> dict:
        """A copy of the weights and the optimizer's state, for a checkpoint."""
        return {"weights": self.weights(), "optimizer": copy.deepcopy(self.opt.state_dict())}

    def load_state(self, state: dict) -> None:
        with torch.no_grad():
            self.w.copy_(state["weights"])
        self.opt.load_state_dict(state["optimizer"])


@contextlib.contextmanager
def one_thread():
    """The server's update on one torch thread, then the driver's count back: on a machine that also
    runs a worker, a small update's threads wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
