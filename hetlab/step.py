"""One training step, the one every single-model loop in hetlab takes (notebook 01).

``train.train``, ``devices.throughput``, a parameter-server worker timing itself alone
(``Worker.standalone``) and ``benchmarks/single_device.py`` all call it, so what they time
is the same work. The parameter server's own steps split it: the worker computes the
gradient, the server takes the optimizer step (``hetlab.ps``); Ray Train's workers
all-reduce between the two halves (``hetlab.raytrain``).
"""
from __future__ import annotations

import torch


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, xb, yb) -> torch.Tensor:
    """Zero the gradients, forward, backward, optimizer step; returns the loss (on the device)."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss
