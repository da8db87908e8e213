"""A model's weights or gradients as one flat vector, and back (notebooks 05, 07).

What travels between machines is one buffer, not a tensor per layer: the parameter server's
weights and gradients, Ray Train's all-reduced gradient. Both sides flatten in
``model.parameters()`` order, so the same offsets mean the same weights.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from torch import nn


# A small buffer travels in pieces inside Ray's call (``pieces_for``); a bigger object goes through
# the object store, from where another machine must pull it: a few ms more per buffer
# (benchmarks/ray_round_trips.py). Pieces go as numpy arrays: Ray sends their raw bytes, a torch
# tensor through pickle (one 58 KB piece: 2.1 ms a call instead of 1.4 ms, same benchmark).
INLINE_BYTES = 100 * 1024   # Ray's max_direct_call_object_size: objects up to this go inside the call
PIECE_BYTES = 96 * 1024     # a piece's data, leaving room for what pickling adds
MOST_PIECES = 16            # past this a buffer goes as one object, through the object store


def pieces_for(nbytes: int) -> int:
    """In how many pieces a ``nbytes`` buffer travels between the driver, workers and server
    (notebook 05): each small enough to go inside Ray's call, or 1 (one object in Ray's object
    store, which big buffers are better off in) when that would take more than MOST_PIECES."""
    k = max(1, -(-nbytes // PIECE_BYTES))
    return k if k <= MOST_PIECES else 1


def split_pieces(flat: torch.Tensor, pieces: int) -> tuple:
    """``flat`` as ``pieces`` consecutive copies for the wire (a view would carry the whole
    buffer with it): numpy arrays when they go inside Ray's call; otherwise (a buffer too big
    for that, or bfloat16, which numpy lacks) torch tensors. One piece is ``flat`` itself (inside
    the call: its numpy view, whose pickle carries its own bytes only): Ray copies it when sent."""
    inline = flat.numel() * flat.element_size() <= pieces * PIECE_BYTES and flat.dtype != torch.bfloat16
    if not inline:
        return tuple(p.clone() for p in flat.tensor_split(pieces)) if pieces > 1 else (flat,)
    if pieces == 1:
        return (flat.detach().cpu().numpy(),)
    return tuple(p.numpy().copy() for p in flat.detach().cpu().tensor_split(pieces))


def join_pieces(pieces) -> torch.Tensor:
    """The flat buffer back from its pieces, as a new torch tensor (Ray's numpy arrays are
    read-only); a single torch tensor is returned as it is."""
    if all(isinstance(p, np.ndarray) for p in pieces):
        return torch.from_numpy(np.concatenate(pieces))
    return pieces[0] if len(pieces) == 1 else torch.cat(list(pieces))


def _params(model_or_params) -> list:
    return list(model_or_params.parameters() if isinstance(model_or_params, nn.Module) else model_or_params)


def flat_weights(model: nn.Module | Iterable) -> torch.Tensor:
    """All parameters as one new fp32 CPU tensor."""
    return torch.nn.utils.parameters_to_vector(_params(model)).detach().float().cpu().clone()


def flat_grad(model: nn.Module | Iterable, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """All gradients as one CPU vector in ``dtype`` (what goes on the wire, or to gloo)."""
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
