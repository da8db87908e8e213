"""What the other machine knows, brought over the cluster (notebooks 04, 08, 09): no file carried by hand.

- ``fetch("mac")``: a task pinned to the Mac's node reads notebook 02's figures there (or measures a
  short sweep there first) and the desktop keeps a copy; ``fetch_graded``: the Mac's exercise results.
- ``measure_link()``: the link timed through Ray itself, Ray's overhead included: a timed object
  transfer at a few sizes, and small echoes to an actor on the Mac.
- ``describe_machines()``: ``machine.facts()`` read on each role's node, for the report's machine table.
"""
from __future__ import annotations

import socket
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import ray

from hetlab.store import measured
from hetlab.cluster.roles import joined, placement

MODELS = ("small", "classic")


@dataclass(frozen=True)
class Fetched:
    """What ``fetch`` brought: the file kept here, the figures, and where they were read or measured."""

    role: str
    path: Path
    data: dict
    node_id: str
    hostname: str
    measured_now: bool


def _read_there(role: str, there: str | None) -> tuple[dict | None, str, str]:
    return (measured.load(role, there), ray.get_runtime_context().get_node_id(), socket.gethostname())


def _measure_there(role: str, there: str | None, batch_sizes: tuple[int, ...], steps: int,
                   simulated: bool = False) -> tuple[dict, str, str]:
    from hetlab.core import devices
    from hetlab.core.models import make_model
    from hetlab.arithmetic.estimates import COURSE_BATCH
    from hetlab.arithmetic.steady import WINDOWS
    from hetlab.core.train import measure_speed
    device = devices.best()
    figures = {name: [measure_speed(make_model(name), device, b, steps=steps).samples_per_s for b in batch_sizes]
               for name in MODELS}
    measured.save(role, devices.describe(device), batch_sizes, figures, where=there, simulated=simulated,
                  speeds={"small": measure_speed(make_model("small"), device, COURSE_BATCH, steps=steps * WINDOWS)})
    return _read_there(role, there)   # what was saved, read back as a fetch reads it


def fetch(role: str = "mac", where: str | Path | None = None, *, there: str | None = None,
          quick: bool = False, timeout: float = 600.0) -> Fetched:
    """Read ``role``'s saved figures on its own node (``there``: its folder) and keep them here
    (``where``); with no figures there, measure that machine there first (``quick``: a shorter sweep)."""
    nodes, simulated = joined(role, "fetching figures")
    reader = ray.remote(num_cpus=0)(_read_there).options(**placement(role))
    data, node_id, hostname = ray.get(reader.remote(role, there), timeout=timeout)
    measured_now = data is None
    if measured_now:
        gpu = nodes[0]["Resources"].get("GPU", 0) >= 1
        sweep = ray.remote(num_cpus=1)(_measure_there).options(**placement(role, gpu=gpu))
        data, node_id, hostname = ray.get(
            sweep.remote(role, there, measured.QUICK_SWEEP_BATCHES if quick else measured.SWEEP_BATCHES, 3 if quick else 10, simulated),
            timeout=timeout)
    return Fetched(role, measured.keep(role, data, where), data, node_id, hostname, measured_now)


def fetch_graded(role: str = "mac", where: str | Path | None = None, *, there: str | None = None,
                 timeout: float = 120.0) -> int:
    """Bring ``role``'s exercise results (its check cells, e.g. notebook 02's on the Mac) to this
    machine's file, read on its own node like its figures; returns how many it holds."""
    joined(role, f"fetching the {role}'s exercise results")
    results = ray.get(ray.remote(num_cpus=0)(measured.load_graded).options(**placement(role)).remote(there),
                      timeout=timeout)
    measured.keep_graded(results, where)
    return len(results)


# --- the link (notebook 08, the report) --------------------------------------------------------------

SIZES_MB = (1, 4, 16)        # over Ray's inline limit (100 kB): each goes through the object store


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


def measure_link(sizes_mb=SIZES_MB, repeats: int = 3, echoes: int = 10, where=None) -> MeasuredLink:
    """Time the link from this driver to the Mac's node: ``repeats`` fresh objects at each size, then
    ``echoes`` small round trips (labelled simulated on a practice stand-in); kept as ``link.json``
    in ``where`` for the report."""
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
    link = MeasuredLink(statistics.median(last), min(last), max(last), statistics.median(trips), min(trips),
                        max(trips), tuple(int(mb) for mb in sizes_mb), tuple(statistics.median(r) for r in by_size),
                        repeats, echoes, measured.origin(simulated))
    measured.save_figure("link", asdict(link), where)
    return link


# --- each machine described on itself (notebook 09, the report's machine table) ---------------------

def _facts_there() -> dict:
    from hetlab.core.machine import facts
    return {**facts(), "node_id": ray.get_runtime_context().get_node_id()}


def describe_machines(roles=("desktop", "mac"), where=None, timeout: float = 120.0) -> dict:
    """role → that node's facts, each read on its own node (``origin``: practice, pair or a host's label);
    kept as ``machines.json`` in ``where`` for the report."""
    task = ray.remote(num_cpus=0)(_facts_there)
    refs = {}
    for role in roles:
        _, simulated = joined(role, "describing the machines")
        refs[role] = (task.options(**placement(role)).remote(), simulated)
    out = {}
    for role, (ref, simulated) in refs.items():
        there = ray.get(ref, timeout=timeout)
        out[role] = {**there, "origin": measured.PRACTICE if simulated else there.get("origin", measured.PAIR)}
    origins = {f["origin"] for f in out.values()}
    kind = measured.PRACTICE if measured.PRACTICE in origins else min(origins - {measured.PAIR} or origins)
    measured.save_figure("machines", {"machines": out, "origin": kind}, where)
    return out
