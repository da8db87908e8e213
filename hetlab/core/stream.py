"""Uniform sampling for unequal batches (notebook 05): ONE cursor (``Stream``) into one shuffled
stream of positions, so every sample is drawn at the same rate whatever the split. Position p is
sample ``epoch_order(n, seed, p // n)[p % n]``; a worker gets spans ``(start, size)`` of positions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from hetlab.core.data import epoch_order


def stream_indices(n: int, seed: int, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The samples at ``spans`` of the stream (a span may run on into the next epoch). One span within
    one epoch is a slice of that epoch's cached order: read it, never write to it."""
    parts = []
    for start, size in spans:
        while size > 0:
            epoch, offset = divmod(start, n)
            part = epoch_order(n, seed, epoch)[offset: offset + size]
            parts.append(part)
            start, size = start + len(part), size - len(part)
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def split_spans(spans: Sequence[tuple[int, int]], sizes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Cut ``spans`` into consecutive pieces of ``sizes`` positions: worker i's share of a step."""
    queue, out = [tuple(s) for s in spans], []
    for size in sizes:
        mine = []
        while size > 0:
            start, n = queue.pop(0)
            take = min(n, size)
            mine.append((start, take))
            if take < n:
                queue.insert(0, (start + take, n - take))
            size -= take
        out.append(mine)
    return out


def _merged(spans) -> list[tuple[int, int]]:
    """Sorted spans, neighbours joined: [(0, 4), (4, 2), (9, 1)] → [(0, 6), (9, 1)]."""
    out: list[tuple[int, int]] = []
    for start, size in sorted(tuple(s) for s in spans):
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + size)
        else:
            out.append((start, size))
    return out


@dataclass
class Stream:
    """A training's one cursor into the shuffled stream: ``take(b)`` hands out first the positions given
    back (a lost worker's batch), then new ones from ``cursor``, so a checkpoint taken when nothing
    is out resumes the data order exactly."""

    cursor: int = 0
    pending: list[tuple[int, int]] = field(default_factory=list)  # given back, handed out first

    def take(self, size: int) -> list[tuple[int, int]]:
        """The next ``size`` positions, as spans ``(start, size)``."""
        spans = list(self.pending)
        new = size - min(size, sum(n for _, n in spans))
        if new:
            spans.append((self.cursor, new))
            self.cursor += new
        mine, self.pending = split_spans(spans, [size, sum(n for _, n in spans) - size])
        return _merged(mine)

    def give_back(self, spans: Sequence[tuple[int, int]]) -> None:
        """Positions handed out but never applied: the next ``take`` hands them out again."""
        self.pending = _merged([*self.pending, *spans])

    def state(self) -> dict:
        """Plain numbers for a checkpoint."""
        return {"cursor": self.cursor, "pending": [list(s) for s in self.pending]}

    @classmethod
    def from_state(cls, state: dict) -> "Stream":
        return cls(int(state["cursor"]), [(int(a), int(b)) for a, b in state["pending"]])
