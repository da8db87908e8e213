"""The link between the two machines, measured by hetlab through Ray itself (notebook 08, the report).

No iperf3 and no extra firewall port: the bandwidth is a timed Ray object transfer at a few sizes
(the driver, on the desktop, puts a fresh block of bytes; a task pinned to the Mac's node pulls it
and times its own ``ray.get``), the round trip a small echo to an actor pinned there. Each figure
is a median over repeats with the lowest and highest beside it. Both include Ray's own overhead:
they are what the parameter server's messages see, a little under what a raw socket would show.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import ray

from hetlab.store import measured
from hetlab.cluster.roles import joined, placement

SIZES_MB = (1, 4, 16)        # over Ray's inline limit (100 kB): each goes through the object store
REPEATS = 3
ECHOES = 10
FILE = "link"


@dataclass(frozen=True)
class MeasuredLink:
    """The measured link: Mbit/s (median of the repeats at the largest size) and round trip (ms)."""

    mbit_s: float
    mbit_s_low: float
    mbit_s_high: float
    rtt_ms: float
    rtt_ms_low: float
    rtt_ms_high: float
    sizes_mb: tuple
    mbit_s_by_size: tuple      # median Mbit/s at each size
    repeats: int
    echoes: int
    origin: str

    def as_link(self, name: str = "my link, measured by hetlab"):
        """The planner's ``Link`` with these figures (notebook 08's exercise 3)."""
        from hetlab.arithmetic.planner import Link
        return Link(self.mbit_s, self.rtt_ms, name)

    def as_dict(self) -> dict:
        return {**asdict(self), "sizes_mb": list(self.sizes_mb), "mbit_s_by_size": list(self.mbit_s_by_size)}

    def __str__(self) -> str:
        return (f"{self.mbit_s:,.0f} Mbit/s (repeats {self.mbit_s_low:,.0f}–{self.mbit_s_high:,.0f}, "
                f"{self.sizes_mb[-1]} MB objects), round trip {self.rtt_ms:.2f} ms "
                f"({self.rtt_ms_low:.2f}–{self.rtt_ms_high:.2f}, {self.echoes} echoes); through Ray")


def _pull(refs: list) -> tuple[float, int]:
    """On the far node: the seconds its ``ray.get`` takes to bring the object over, and its size."""
    t0 = time.perf_counter()
    block = ray.get(refs[0])
    return time.perf_counter() - t0, len(block)


@ray.remote(num_cpus=0)
class _Echo:
    def echo(self, x):
        return x


def measure(sizes_mb=SIZES_MB, repeats: int = REPEATS, echoes: int = ECHOES) -> MeasuredLink:
    """Time the link from this driver to the Mac's node: ``repeats`` fresh objects at each size, then
    ``echoes`` small round trips; labelled simulated when that node is a practice stand-in. (The three
    counts: tests/test_practice.py measures a shorter link the same way.)"""
    role, timeout = "mac", 120.0
    _, simulated = joined(role, "measuring the link")
    pull = ray.remote(num_cpus=0)(_pull).options(**placement(role))
    ray.get(pull.remote([ray.put(b"w" * 1024)]), timeout=timeout)           # warm-up: the worker's start
    by_size = []
    for mb in sizes_mb:
        rates = []
        for r in range(repeats):
            ref = ray.put(bytes([r % 256]) * (int(mb) * 2**20))           # a fresh object: nothing cached there
            seconds, n = ray.get(pull.remote([ref]), timeout=timeout)
            rates.append(n * 8 / max(seconds, 1e-9) / 1e6)
            del ref
        by_size.append(rates)
    echo = _Echo.options(**placement(role)).remote()
    ray.get(echo.echo.remote(b"x"), timeout=timeout)                          # warm-up: the actor's start
    trips = []
    for _ in range(echoes):
        t0 = time.perf_counter()
        ray.get(echo.echo.remote(b"x"), timeout=timeout)
        trips.append((time.perf_counter() - t0) * 1e3)
    ray.kill(echo)
    last = by_size[-1]
    return MeasuredLink(statistics.median(last), min(last), max(last), statistics.median(trips), min(trips),
                     max(trips), tuple(int(mb) for mb in sizes_mb), tuple(statistics.median(r) for r in by_size),
                     repeats, echoes, measured.origin(simulated))


def save(link: MeasuredLink, where=None):
    """Keep the measured link as ``link.json`` for the report (and the planner's ``Link``)."""
    return measured.save_figure(FILE, link.as_dict(), where)
