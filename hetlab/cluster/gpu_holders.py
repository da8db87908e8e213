"""Who holds a machine's GPU in the Ray cluster, said in one line (notebooks 05, 06, 08).

A worker that asks Ray for a GPU waits until it is free; a notebook kernel that never reached its
shutdown cell keeps its actors, and the GPU, so the new worker would wait silently until a timeout.
``check_free`` fails at once instead, naming the holder (actor class, job, driver) and the fix.
"""
from __future__ import annotations

import time

import ray

from hetlab.cluster.roles import live_nodes
from hetlab.errors import HetlabError

RELEASE_WAIT_S = 10.0  # a GPU released just now (training.shutdown(): ray.kill is asynchronous; a
                       # driver exiting) shows up free within this; seen here: 0.1 s after ray.kill
SEE_HOLDERS = "`ray list actors --filter state=ALIVE` on the head lists what holds it"


def _where(role: str | None) -> str:
    return f"the {role} machine" if role else "any node"


def gpus_available(node_ids: list[str]) -> float | None:
    """GPUs free for a new actor now on these nodes (Ray's GCS view); None if Ray cannot say."""
    try:
        from ray._private.state import available_resources_per_node
        free = available_resources_per_node()
    except Exception:  # noqa: BLE001 - a Ray internal changed: skip the check, never block training
        return None
    return sum(free.get(i, {}).get("GPU", 0) for i in node_ids)


# Read from Ray's GCS (no dashboard needed): resources per node, the actor table, the job table
# (each driver's pid, address, command line). Developer APIs (ray._private.state): should they
# change, the check still fails fast but names no holder.
def holders(node_ids: list[str]) -> list[dict]:
    """Live actors on these nodes that hold a GPU: class, job id, pid, node id."""
    try:
        from ray._private.state import state
        from ray.core.generated import gcs_pb2
        rows = []
        for raw in state._connect_and_get_accessor().get_actor_table(None, "ALIVE"):
            actor = gcs_pb2.ActorTableData.FromString(raw)
            node = (actor.node_id or actor.address.node_id).hex()
            if node in node_ids and any(k == "GPU" or k.startswith("GPU_group_")
                                        for k, v in actor.required_resources.items() if v > 0):
                rows.append({"class": actor.class_name, "job": actor.job_id.hex(), "pid": actor.pid,
                             "node": node})
        return rows
    except Exception:  # noqa: BLE001 - a Ray internal changed: fail fast anyway, without names
        return []


def jobs() -> dict:
    """Job id → Ray's job-table row (DriverPid, DriverIPAddress, Entrypoint, IsDead)."""
    try:
        from ray._private.state import state
        return {j["JobID"]: j for j in state.job_table()}
    except Exception:  # noqa: BLE001 - as above
        return {}


def describe_holders(found: list[dict], job_rows: dict, here: str | None) -> tuple[str, str]:
    """(who holds the GPU, how to free it), as phrases for one line; pure, for tests."""
    if not found:
        return ("something Ray cannot name as an actor (a task, or a placement group such as a Ray "
                "Train run's)", f"stop that run, then run this again; {SEE_HOLDERS}")
    by_job: dict[str, list[str]] = {}
    for h in found:
        by_job.setdefault(h["job"], []).append(h["class"])
    parts, kinds = [], set()
    for job, classes in by_job.items():
        names = ", ".join(f"{classes.count(c)} {c}" if classes.count(c) > 1 else c
                          for c in dict.fromkeys(classes))
        row = job_rows.get(job, {})
        if job == here:
            parts.append(f"this kernel's own earlier actors (job {job}: {names})")
            continue
        entry = str(row.get("Entrypoint", ""))
        kind = ("another notebook's kernel" if "ipykernel" in entry else
                "a `hetlab train` run" if "hetlab" in entry and "train" in entry else "another Ray program")
        pid = f", pid {row['DriverPid']} on {row.get('DriverIPAddress') or '?'}" if row.get("DriverPid") else ""
        kinds.add(kind)
        parts.append(f"{kind} (job {job}{pid}) through its {names} actor{'s' if len(classes) > 1 else ''}")
    if not kinds:  # only this process's own actors
        return " and ".join(parts), ("shut that training down (training.shutdown()) or restart this "
                                     "kernel, then run this again")
    stop = ("restart or shut down that kernel (or run training.shutdown() there)"
            if kinds == {"another notebook's kernel"} else "stop that program (or run training.shutdown() in it)")
    return " and ".join(parts), f"{stop}, then run this again; {SEE_HOLDERS}"


def check_free(wanted: list[tuple[str, str | None]]) -> None:
    """Fail now, in one line, if a GPU these workers ask for is missing or held by someone else.

    ``wanted``: (worker name, role) of each worker that asks Ray for a GPU. Waits up to
    ``RELEASE_WAIT_S`` for a GPU released a moment ago (Ray frees an actor's GPU asynchronously).
    """
    demand: dict[str | None, list[str]] = {}
    for name, role in wanted:
        demand.setdefault(role, []).append(name)
    deadline = time.monotonic() + RELEASE_WAIT_S
    for role, names in demand.items():
        found = [n for n in live_nodes(role) if n["Resources"].get("GPU", 0) >= 1]
        if not found:
            return  # placement() already said that no such node has a GPU
        nodes, total = [n["NodeID"] for n in found], sum(n["Resources"]["GPU"] for n in found)
        if total < len(names):
            raise HetlabError(f"workers {names} each ask for a GPU on {_where(role)}, which has "
                              f"{total:g}: give all but {total:g} of them device='cpu'.")
        while (free := gpus_available(nodes)) is not None and free < len(names):
            if time.monotonic() >= deadline:
                who, fix = describe_holders(holders(nodes), jobs(), ray.get_runtime_context().get_job_id())
                asks = f"workers {names} need" if len(names) > 1 else f"worker {names[0]!r} needs"
                raise HetlabError(f"{asks} the GPU on {_where(role)}, but it is held by {who}: {fix}.")
            time.sleep(0.25)
