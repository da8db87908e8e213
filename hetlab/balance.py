"""Per-worker batch sizes from measured speed, and an auto-tuner (notebooks 05, 06).

In synchronous data parallelism every step waits for the slowest worker. If worker
*i* processes ``t_i`` samples per second, giving it a batch ``b_i ∝ t_i`` makes every
worker take the same ``b_i / t_i`` seconds, so nobody waits. ``split_batch`` turns
a ratio (or measured throughputs) into integer batch sizes that add up exactly to
the global batch; ``auto_tune`` measures, re-splits, and repeats until it settles.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Sequence

from hetlab.errors import HetlabError


def check_weights(weights: Sequence[float], n: int | None = None) -> list[float]:
    """Validate a ratio / throughput list: finite, positive numbers, ``n`` of them if given."""
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise HetlabError(f"ratio {weights!r} must be a list of numbers, e.g. [4, 1].")
    values = list(weights)
    if not values:
        raise HetlabError("ratio is empty: give one positive number per worker, e.g. [4, 1].")
    if n is not None and len(values) != n:
        raise HetlabError(
            f"ratio {values} has {len(values)} entries but there are {n} workers: give one per worker."
        )
    for i, w in enumerate(values):
        if isinstance(w, bool) or not isinstance(w, Real):
            raise HetlabError(f"ratio entry {i} is {w!r}: every entry must be a number.")
        if not math.isfinite(w):
            raise HetlabError(f"ratio entry {i} is {w}: every entry must be a finite number.")
        if w <= 0:
            raise HetlabError(
                f"ratio entry {i} is {w}: every worker needs a positive share (remove a worker instead of giving it 0)."
            )
    return [float(w) for w in values]


def split_batch(global_batch: int, weights: Sequence[float], n: int | None = None) -> list[int]:
    """Split ``global_batch`` into integer sizes ≥ 1 proportional to ``weights`` (notebook 05).

    Largest-remainder rounding: each worker gets the floor of its exact share, and the
    samples left over go to the largest fractional parts, so the sizes sum exactly to
    ``global_batch``. ``split_batch(64, [4, 1]) == [51, 13]``.
    """
    w = check_weights(weights, n)
    if isinstance(global_batch, bool) or not isinstance(global_batch, Integral):
        raise HetlabError(f"global batch {global_batch!r} must be a whole number, e.g. 128.")
    global_batch = int(global_batch)
    if global_batch < len(w):
        raise HetlabError(
            f"global batch {global_batch} is smaller than the number of workers ({len(w)}): each worker needs at least one sample."
        )
    total = sum(w)
    quotas = [global_batch * wi / total for wi in w]
    sizes = [math.floor(q) for q in quotas]
    left = global_batch - sum(sizes)
    by_remainder = sorted(range(len(w)), key=lambda i: (-(quotas[i] - sizes[i]), i))
    for i in by_remainder[:left]:
        sizes[i] += 1
    for i in range(len(sizes)):  # a tiny share still gets one sample ...
        if sizes[i] == 0:
            sizes[i] = 1
    while sum(sizes) > global_batch:  # ... taken from whoever got most above its share
        donor = max((j for j in range(len(sizes)) if sizes[j] > 1),
                    key=lambda j: (sizes[j] - quotas[j], sizes[j]))
        sizes[donor] -= 1
    return sizes


def ratio_of(sizes: Sequence[float]) -> list[float]:
    """Sizes (or throughputs) as fractions that sum to 1, e.g. [48, 16] → [0.75, 0.25]."""
    w = check_weights(sizes)
    total = sum(w)
    return [wi / total for wi in w]
