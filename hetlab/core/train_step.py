"""One training step, the one every single-model loop in hetlab takes (notebook 01).

``train.train``, ``devices.throughput``, a parameter-server worker timing itself alone
(``Worker.standalone``) and ``benchmarks/single_device.py`` all call it, so what they time
is the same work. The parameter server's own steps split it: the worker computes the
gradient, the server takes the optimizer step (``hetlab.ps``); Ray Train's workers
all-reduce between the two halves (``hetlab.raytrain.mixed``).
"""
from __future__ import annotations

import torch

from hetlab.errors import HetlabError
from hetlab.vocab import OPTIMIZERS

TORCH_OPTIMIZERS = {"adam": "Adam", "sgd": "SGD"}  # vocab.OPTIMIZERS → the class's name in torch.optim


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """The optimizer called ``name`` in ``vocab.OPTIMIZERS`` (Adam, or plain SGD) over ``params``."""
    if name not in OPTIMIZERS:
        raise HetlabError(f"unknown optimizer {name!r}: use one of {OPTIMIZERS}.")
    return getattr(torch.optim, TORCH_OPTIMIZERS[name])(params, lr=lr)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, xb, yb) -> torch.Tensor:
    """Zero the gradients, forward, backward, optimizer step; returns the loss (on the device)."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss
