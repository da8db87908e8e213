"""The parameter server: one flat fp32 weight buffer and the optimizer that updates it (notebook 05).

Workers send gradients (or local-SGD deltas); the server combines them weighted by
how many samples each one stands for — Σ (b_i / Σb) · g_i, not the plain mean (which
over-weights a small batch) nor the sum (which scales with the number of workers) —
and takes one optimizer step. The arithmetic (coefficients, async scale, staleness
bound) is in ``hetlab.ps.specs``, plain functions that tests call without Ray.
"""
from __future__ import annotations

import time
import ray
import torch
from torch import nn

from hetlab.flat import flat_weights, join_pieces, split_pieces
from hetlab.models import make_model


class Server:
    """A Ray actor owning the weights and the optimizer (Adam, or plain SGD with
    ``optimizer="sgd"``; outer SGD in local-SGD mode)."""

    def __init__(self, model, seed: int, lr: float, mode: str,
                 outer_lr: float = 1.0, outer_momentum: float = 0.0, optimizer: str = "adam"):
        torch.set_num_threads(1)
        self.w = nn.Parameter(flat_weights(make_model(model, seed=seed)))
        if mode == "local_sgd":  # DiLoCo's outer step: SGD (Nesterov when momentum > 0)
            self.opt = torch.optim.SGD([self.w], lr=outer_lr, momentum=outer_momentum,
                                       nesterov=outer_momentum > 0)
        else:
            self.opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)([self.w], lr=lr)
        self.version = 0

    def weights(self, pieces: int = 1):
        """The weights, in ``pieces`` pieces (``hetlab.flat.pieces_for``; one: the tensor)."""
        out = split_pieces(self.w.detach().clone(), pieces)
        return out if pieces > 1 else out[0]

    @ray.method(num_returns=2)
    def apply(self, coefficients: list[float], *grads: torch.Tensor, pieces: int = 1):
        """Σ c_i · g_i as the gradient, one optimizer step; returns (new weights in ``pieces``
        pieces, meta). ``grads``: each gradient's pieces in turn, as many for each."""
        t0 = time.perf_counter()
        combined = torch.zeros_like(self.w)
        per = len(grads) // len(coefficients)
        for i, c in enumerate(coefficients):
            combined.add_(join_pieces(grads[i * per:(i + 1) * per]).float(), alpha=c)
        self.w.grad = combined
        self.opt.step()
        self.w.grad = None
        self.version += 1
        return (*split_pieces(self.w.detach().clone(), pieces),
                {"version": self.version, "server_s": time.perf_counter() - t0})

    def state(self) -> dict:
        """Weights, optimizer state and version, for a checkpoint on the driver."""
        return {"weights": self.w.detach().clone(), "optimizer": self.opt.state_dict(),
                "version": self.version}

    def load_state(self, state: dict) -> int:
        with torch.no_grad():
            self.w.copy_(state["weights"])
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        return self.version
