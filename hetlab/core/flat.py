"""A model's weights or gradients as one flat vector in ``model.parameters()`` order, and back: what
travels between machines (notebooks 05, 07).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def _params(model_or_params) -> list:
    return list(model_or_params.parameters() if isinstance(model_or_params, nn.Module) else model_or_params)


def flat_weights(model: nn.Module | Iterable) -> torch.Tensor:
    """All parameters as one new fp32 CPU tensor."""
    return torch.nn.utils.parameters_to_vector(_params(model)).detach().float().cpu().clone()


def flat_grad(model: nn.Module | Iterable, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """All gradients as one CPU vector in ``dtype`` (what goes on the wire, or to an all-reduce)."""
    return torch.cat([p.grad.detach().reshape(-1) for p in _params(model)]).to("cpu", dtype)


@torch.no_grad()
def load_flat(model: nn.Module | Iterable, flat: torch.Tensor) -> None:
    """Copy a flat buffer into the parameters (copies: the buffer may be Ray's read-only memory)."""
    _copy_into([p for p in _params(model)], flat)


@torch.no_grad()
def set_flat_grad(model: nn.Module | Iterable, flat: torch.Tensor) -> None:
    """Copy a flat buffer into each parameter's ``.grad``, on the parameter's device and dtype."""
    _copy_into([p.grad for p in _params(model)], flat)


def _copy_into(tensors: list, flat: torch.Tensor) -> None:
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset: offset + n].view_as(t))  # copy_ moves device and dtype itself
        offset += n
