"""The parameter server's rules (notebook 05), with no Ray in them so that tests and the notebook
check them directly: the weighted combination Σ (b_i / Σb) · g_i of a synchronous step, the scale of
one gradient applied alone in async mode, and the bound on staleness."""
from __future__ import annotations

from typing import Sequence


def combine_coefficients(samples: Sequence[int]) -> list[float]:
    """Weights b_i / Σb of each worker's gradient in a synchronous step (notebook 05)."""
    total = float(sum(samples))
    return [s / total for s in samples]


def async_scale(batch_size: int, batch_sizes: Sequence[int]) -> float:
    """Scale of one gradient applied alone in async mode: b_i / mean(b) (1 for equal batches)."""
    return batch_size * len(batch_sizes) / float(sum(batch_sizes))


def staleness_allows(version: int, reads_in_flight: Sequence[int], max_staleness: int) -> bool:
    """May one more worker start computing now without any gradient exceeding ``max_staleness``?

    A gradient computed on version r and applied at version V has staleness V − r. A
    gradient in flight can be overtaken by at most every other gradient in flight, so
    its worst case is (version − r) + (number in flight − 1). Starting a new worker is
    allowed only if that bound stays within ``max_staleness`` for everyone: a fast worker
    waits instead of racing ahead, and no gradient is ever thrown away (notebook 05).
    """
    n_after = len(reads_in_flight) + 1
    if n_after - 1 > max_staleness:
        return False
    return all(version - r + n_after - 1 <= max_staleness for r in reads_in_flight)
