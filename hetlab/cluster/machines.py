"""Each machine described on itself, read over the cluster (the report's machine table, notebook 09).

A task pinned to each role's node runs ``hetlab.core.machine.facts()`` there: the chip and GPU, their
memory, the OS (and WSL build), driver, CUDA or MPS, torch, Ray, Python and hetlab with its commit.
Nothing is typed by hand; a practice stand-in says it is one (the node's simulated label).
"""
from __future__ import annotations

import ray

from hetlab.store import measured
from hetlab.cluster.roles import joined, placement

FILE = "machines"


def _facts_there() -> dict:
    from hetlab.core.machine import facts
    return {**facts(), "node_id": ray.get_runtime_context().get_node_id()}


def collect(roles=("desktop", "mac"), timeout: float = 120.0) -> dict:
    """role → that node's facts, each read on its own node; ``origin`` says practice, pair or a host's label."""
    task = ray.remote(num_cpus=0)(_facts_there)
    refs = {}
    for role in roles:
        _, simulated = joined(role, "describing the machines")
        refs[role] = (task.options(**placement(role)).remote(), simulated)
    out = {}
    for role, (ref, simulated) in refs.items():
        there = ray.get(ref, timeout=timeout)
        out[role] = {**there, "origin": measured.PRACTICE if simulated else there.get("origin", measured.PAIR)}
    return out


def save(described: dict, where=None):
    """Keep ``collect()``'s table as ``machines.json`` for the report."""
    origins = {f["origin"] for f in described.values()}
    kind = measured.PRACTICE if measured.PRACTICE in origins else min(origins - {measured.PAIR} or origins)
    return measured.save_figure(FILE, {"machines": described, "origin": kind}, where)
