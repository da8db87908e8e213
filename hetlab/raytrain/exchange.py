"""The ranks' exchange between a Mac and a Linux desktop: a ``torch.distributed`` backend, ``"hetlab"``,
whose collectives travel through the rendezvous store (notebook 07).

Why not gloo: PyTorch builds gloo's TCP transport on Linux and its UV transport on macOS, and the two
never connect (pytorch/pytorch#144851, pytorch/gloo#383); NCCL cannot reach a Mac at all. The
rendezvous store, torch's own small TCP key-value server on rank 0's machine, is the same on both
systems. Each collective is one ``everyone``: every rank puts its piece there and reads the others';
an all-reduce adds them in rank order, the same bits on every rank. The rank's code stays standard:
``dist.all_reduce(buf)``, ``dist.all_gather_object``, ``dist.barrier``.
"""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

BACKEND = "hetlab"


def register() -> None:
    """Make ``init_process_group(backend="hetlab")`` known in this process (once)."""
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, StoreExchange, devices=["cpu", "cuda", "mps"])


def everyone(store, key: str, rank: int, world: int, piece: bytes) -> list[bytes]:
    """Every rank's piece of collective ``key``, in rank order: put this rank's piece in the store
    under ``key/rank``, then read the others' (the store waits until each is there)."""
    store.set(f"{key}/{rank}", piece)
    others = iter(store.multi_get([f"{key}/{r}" for r in range(world) if r != rank]))
    return [piece if r == rank else next(others) for r in range(world)]


class StoreExchange(dist.ProcessGroup):
    """A process group whose every collective is one round of pieces through the rendezvous store."""

    def __init__(self, store, rank: int, world_size: int, timeout: timedelta):
        super().__init__(rank, world_size)
        self._store, self._rank, self._world = store, rank, world_size
        self._timeout_s = timeout.total_seconds()
        self._round = 0

    def everyone(self, piece: bytes) -> list[bytes]:
        """Every rank's piece of the next collective, in rank order (``everyone`` above)."""
        self._round += 1
        if self._round > 2:   # every rank has read round - 2: it wrote round - 1 after reading it
            self._store.delete_key(f"{self._round - 2}/{self._rank}")
        try:
            return everyone(self._store, str(self._round), self._rank, self._world, piece)
        except RuntimeError as e:  # the store's own "Wait timeout" or "Connection reset"
            raise RuntimeError(f"rank {self._rank} gave up waiting for the other ranks at collective "
                               f"{self._round} after {self._timeout_s:.0f} s: a rank stopped or lags "
                               f"({str(e).splitlines()[0][:120]})") from None

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op != dist.ReduceOp.SUM:
            raise RuntimeError(f"backend 'hetlab' all-reduces with SUM only, not {op}")
        for t in tensors:
            pieces = [_array(p, t) for p in self.everyone(_bytes(t))]
            total = pieces[0].copy()
            for p in pieces[1:]:            # in rank order on every rank: the same bits everywhere
                total += p
            t.copy_(torch.from_numpy(total).view_as(t))
        return _done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            for out, piece in zip(outs, self.everyone(_bytes(t))):
                out.copy_(torch.from_numpy(_array(piece, out)).view_as(out))
        return _done(output_lists)

    def barrier(self, opts=None):
        self.everyone(b"")
        return _done()

    def shutdown(self):
        """Rank 0's process holds the store: it leaves only once every rank has read the last round."""
        try:
            if self._rank == 0:
                self._store.wait([f"bye/{r}" for r in range(1, self._world)], timedelta(seconds=10))
            else:
                self._store.set(f"bye/{self._rank}", b"")
        except RuntimeError:
            pass  # a rank that is gone says no goodbye: leave all the same

    def getBackendName(self):
        return BACKEND


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().numpy().tobytes()


def _array(piece: bytes, like: torch.Tensor) -> np.ndarray:
    return np.frombuffer(piece, dtype=torch.empty(0, dtype=like.dtype).numpy().dtype).copy()


def _done(result=None):
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)
