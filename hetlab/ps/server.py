"""The parameter server: one flat fp32 weight buffer and the optimizer that updates it (notebook 05).

Workers send gradients (or local-SGD deltas); the server combines them weighted by
how many samples each one stands for — Σ (b_i / Σb) · g_i, not the plain mean (which
over-weights a small batch) nor the sum (which scales with the number of workers) —
and takes one optimizer step. The arithmetic (coefficients, async scale, staleness
bound) is in ``hetlab.ps.specs``, plain functions that tests call without Ray.

It lives in the driver's process, not in an actor of its own: every gradient reaches the
driver anyway (the driver waits for each one), so an actor would add a second trip per step
(gradients on to it, weights back) for nothing. On the practice cluster that trip was 2.5 ms
of the 7.1 ms a step spent outside the workers' compute (``benchmarks/server_trip.py``).
"""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from hetlab.flat import flat_weights
from hetlab.models import make_model
from hetlab.ps.messages import Update


class Server:
    """The weights and the optimizer (Adam, or plain SGD with ``optimizer="sgd"``; outer SGD
    in local-SGD mode), in the driver's process."""

    def __init__(self, model, seed: int, lr: float, mode: str,
                 outer_lr: float = 1.0, outer_momentum: float = 0.0, optimizer: str = "adam"):
        self.w = nn.Parameter(flat_weights(make_model(model, seed=seed)))
        if mode == "local_sgd":  # DiLoCo's outer step: SGD (Nesterov when momentum > 0)
            self.opt = torch.optim.SGD([self.w], lr=outer_lr, momentum=outer_momentum,
                                       nesterov=outer_momentum > 0)
        else:
            self.opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)([self.w], lr=lr)
        self.version = 0

    def weights(self) -> torch.Tensor:
        """A copy of the weights: one flat fp32 CPU tensor."""
        return self.w.detach().clone()

    def apply(self, coefficients: list[float], grads: list[torch.Tensor]) -> Update:
        """Σ c_i · g_i as the gradient, one optimizer step; the ``Update`` holds a copy of the new
        weights. ``grads``: flat buffers in any float dtype (the wire's). It runs on the driver's
        torch threads as they are: this module never changes them."""
        t0 = time.perf_counter()
        combined = torch.zeros_like(self.w)
        for c, g in zip(coefficients, grads):
            combined.add_(g.float(), alpha=c)
        self.w.grad = combined
        self.opt.step()
        self.w.grad = None
        self.version += 1
        return Update(self.w.detach().clone(), self.version, time.perf_counter() - t0)

    def state(self) -> dict:
        """A copy of the weights, the optimizer's state and the version, for a checkpoint."""
        return {"weights": self.w.detach().clone(), "optimizer": copy.deepcopy(self.opt.state_dict()),
                "version": self.version}

    def load_state(self, state: dict) -> int:
        with torch.no_grad():
            self.w.copy_(state["weights"])
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        return self.version

