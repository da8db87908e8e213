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


# Ray sends an object of up to 100 KiB (its max_direct_call_object_size) inside the call itself;
# a bigger one goes through the object store, from where the other side must pull it. The course's
# model (116 KB in fp32) in two pieces inside the calls takes 3.9 ms a round of messages to two
# workers instead of 8.8 ms as one object. Pieces go as numpy arrays, whose raw bytes Ray sends.
PIECE_BYTES = 96 * 1024     # a piece's data, leaving room for what pickling adds
MOST_PIECES = 16            # past this a buffer goes as one object, through the object store


def pieces_for(nbytes: int) -> int:
    """In how many pieces a ``nbytes`` buffer travels: each small enough to go inside a Ray call,
    or 1 (one object in the object store) when that would take more than MOST_PIECES."""
    k = max(1, -(-nbytes // PIECE_BYTES))
    return k if k <= MOST_PIECES else 1


def split_pieces(flat: torch.Tensor, pieces: int) -> tuple:
    """``flat`` as ``pieces`` consecutive copies for the wire: numpy arrays when they fit inside a
    Ray call, else (a big buffer, or bfloat16, which numpy lacks) the torch tensor itself."""
    if flat.numel() * flat.element_size() > pieces * PIECE_BYTES or flat.dtype == torch.bfloat16:
        return tuple(p.clone() for p in flat.tensor_split(pieces)) if pieces > 1 else (flat,)
    return tuple(p.numpy().copy() for p in flat.detach().cpu().tensor_split(pieces))


def join_pieces(pieces) -> torch.Tensor:
    """The flat buffer back from its pieces, as a new torch tensor (Ray's numpy arrays are read-only)."""
    if all(isinstance(p, np.ndarray) for p in pieces):
        return torch.from_numpy(np.concatenate(pieces))
    return pieces[0] if len(pieces) == 1 else torch.cat(list(pieces))


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
