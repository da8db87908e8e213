"""A machine's saved figures, fetched through the cluster (notebook 04 on): no file carried by hand.

Notebook 02 saves each machine's sweep on that machine (``hetlab.store.measured``). Once the
Mac has joined, ``fetch("mac")`` runs a task pinned to the Mac's node that reads its
``measured/mac.json`` there; if the Mac never ran 02, a second task pinned there measures it (a
short sweep on its best device) and saves it on the Mac too. The desktop keeps the result as its
own ``measured/mac.json``, labelled with the Mac's host and date. ``fetch_graded`` brings the Mac's
exercise results the same way (``measured.save_graded``).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import ray

from hetlab.store import measured
from hetlab.cluster.roles import joined, placement
from hetlab.errors import HetlabError

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

    def __str__(self) -> str:
        how = "measured there now" if self.measured_now else "saved there by notebook 02"
        return (f"the {self.role}'s figures ({how}, {self.data.get('device')}, {str(self.data.get('date'))[:10]}), "
                f"read on its node {self.hostname} → {self.path}")


def _read_there(role: str, there: str | None) -> tuple[dict | None, str, str]:
    return (measured.load(role, there), ray.get_runtime_context().get_node_id(), socket.gethostname())


def _measure_there(role: str, there: str | None, batch_sizes: tuple[int, ...], steps: int,
                   models: tuple[str, ...], simulated: bool = False) -> tuple[dict, str, str]:
    from hetlab.core import devices
    from hetlab.core.models import make_model
    device = devices.best()
    figures = {name: [devices.throughput(make_model(name), device, b, steps=steps) for b in batch_sizes]
               for name in models}
    speeds = {"small": devices.course_speed(device, steps=steps)} if "small" in models else {}
    measured.save(role, devices.describe(device), batch_sizes, figures, where=there, simulated=simulated,
                  speeds=speeds)
    return _read_there(role, there)   # what was saved, read back as a fetch reads it


def fetch(role: str = "mac", where: str | Path | None = None, *, there: str | None = None,
          measure: bool = True, quick: bool = False, models: tuple[str, ...] = MODELS,
          timeout: float = 600.0) -> Fetched:
    """Read ``role``'s saved figures on its own node and keep them here (``where``: this machine's
    ``measured/``). ``there`` is the folder on that node (default: its own ``measured/``). With no
    file there and ``measure``, measure that machine there first (``quick``: a shorter sweep)."""
    nodes, simulated = joined(role, "fetching figures")
    reader = ray.remote(num_cpus=0)(_read_there).options(**placement(role))
    data, node_id, hostname = ray.get(reader.remote(role, there), timeout=timeout)
    measured_now = data is None
    if measured_now:
        if not measure:
            raise HetlabError(f"the {role} has no figures of notebook 02: run notebook 02 there, "
                              f"or fetch with measure=True.")
        gpu = nodes[0]["Resources"].get("GPU", 0) >= 1
        sweep = ray.remote(num_cpus=1)(_measure_there).options(**placement(role, gpu=gpu))
        data, node_id, hostname = ray.get(
            sweep.remote(role, there, measured.QUICK_SWEEP_BATCHES if quick else measured.SWEEP_BATCHES, 3 if quick else 10, tuple(models), simulated),
            timeout=timeout)
    return Fetched(role, measured.keep(role, data, where), data, node_id, hostname, measured_now)


def _graded_there(there: str | None) -> dict:
    return measured.load_graded(there)


def fetch_graded(role: str = "mac", where: str | Path | None = None, *, there: str | None = None,
                 timeout: float = 120.0) -> int:
    """Bring ``role``'s exercise results (its check cells, e.g. notebook 02's on the Mac) to this
    machine's file, read on its own node like its figures; returns how many it holds."""
    joined(role, f"fetching the {role}'s exercise results")
    results = ray.get(ray.remote(num_cpus=0)(_graded_there).options(**placement(role)).remote(there), timeout=timeout)
    measured.keep_graded(results, where)
    return len(results)
