"""What every node runs, asked on the node itself: the node table, and the same-code check (notebooks 03, 04).

``nodes()`` runs a tiny task pinned to each live node (``machine.local_report`` there); ``check_same_code``
refuses a node whose hetlab is not this process's, naming the machine to update.
"""
from __future__ import annotations

import os

import ray

from hetlab.cluster.roles import ROLE_LABEL, live_nodes, node_name
from hetlab.core import samecode
from hetlab.errors import HetlabError
from hetlab.vocab import REHEARSAL_ENV

TABLE_COLUMNS = [("name", "node"), ("hostname", "host"), ("os", "OS"), ("ip", "IP"), ("cpus", "CPUs"),
                 ("accelerator", "accelerator"), ("gpus_for_ray", "GPUs for Ray"),
                 ("memory_gb", "memory GiB"), ("python", "Python"),
                 ("ray", "Ray"), ("torch", "torch")]


def nodes(timeout: float = 60.0) -> list[dict]:
    """Ask every live node what it runs (a tiny task pinned to each node) (notebooks 03, 04).

    Each row: node_id, name, role, is_head, ip, ports, plus ``machine.local_report()``
    as measured on that node (hostname, os, cpus, accelerator, memory_gb, versions).
    """
    alive, reports = _on_every_node(_node_report, timeout)
    rows = []
    for node, report in zip(alive, reports):
        labels = node.get("Labels") or {}
        name = node_name(labels, report["hostname"])
        rows.append({"node_id": node["NodeID"],
                     "name": f"{name} (rehearsal)" if report.get("rehearsal") else name,
                     "role": labels.get(ROLE_LABEL), "is_head": "node:__internal_head__" in node["Resources"],
                     "ip": node["NodeManagerAddress"],
                     "ports": {"node manager": node.get("NodeManagerPort"),
                               "object manager": node.get("ObjectManagerPort"),
                               "metrics export": node.get("MetricsExportPort")},
                     "gpus_for_ray": node["Resources"].get("GPU", 0), **report})
    return rows


def _on_every_node(fn, timeout: float) -> tuple[list[dict], list]:
    """``fn()`` run once on every live node, head first: (Ray's node entries, their answers)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise HetlabError("not connected to Ray: call hetlab.cluster.connect() (or start a PracticeCluster) first.")
    alive = sorted(live_nodes(),
                   key=lambda n: ("node:__internal_head__" not in n["Resources"], n["NodeID"]))
    probe = ray.remote(num_cpus=0)(fn)
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in alive]
    try:
        return alive, ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise HetlabError(f"a node did not answer within {timeout:.0f} s: check `ray status` on the head "
                          f"and that hetlab is installed on every node.") from None


def check_same_code(timeout: float = 60.0) -> None:
    """Refuse, in one line naming the machine to update, a node whose hetlab (version and git
    commit, ``hetlab.core.samecode``) is not this process's: its workers would run other code.
    The report goes to the nodes by value, so a node on an older layout answers it too."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(samecode)
    alive, reports = _on_every_node(samecode.code_here, timeout)
    names = ["the " + node_name(n.get("Labels") or {}, n["NodeManagerAddress"]) for n in alive]
    here = ray.get_runtime_context().get_node_id()
    mine = next((name for n, name in zip(alive, names) if n["NodeID"] == here), "this notebook")
    problem = samecode.mismatch(mine, samecode.code_here(),
                                {("this notebook's node" if n == mine else n): r for n, r in zip(names, reports)})
    if problem:
        raise HetlabError(problem)


def _node_report() -> dict:
    """What a node says about itself (``machine.local_report``), and whether it is a rehearsal host."""
    from hetlab.core.machine import local_report
    return {**local_report(), "rehearsal": os.environ.get(REHEARSAL_ENV)}


class NodeTable(list):
    """Rows from ``nodes()``; a readable table in a notebook (HTML) and a terminal (text)."""

    def _cells(self):
        return [[str(row.get(key, "")) for key, _ in TABLE_COLUMNS] for row in self]

    def __str__(self) -> str:
        header = [title for _, title in TABLE_COLUMNS]
        cells = self._cells()
        widths = [max(len(x) for x in column) for column in zip(header, *cells)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [header] + cells]
        return "\n".join(lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:])

    def _repr_html_(self) -> str:
        import html
        head = "".join(f"<th>{html.escape(title)}</th>" for _, title in TABLE_COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in self._cells())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def node_table(timeout: float = 60.0) -> NodeTable:
    """``nodes()`` as a NodeTable: display it in a notebook, ``print`` it in a terminal."""
    return NodeTable(nodes(timeout))
