"""Each machine's role in the pair, actors pinned to it, and who holds its GPU (notebooks 03-08).

Every hetlab node carries its *role* ("desktop" or "mac") twice: as a custom resource
(``hetlab-role:mac``, which ``placement(role)`` asks a sliver of) and as a node label (``hetlab-role=mac``,
for Ray Train's ``label_selector``). ``check_free`` fails at once, in one line, where a worker would wait
silently for a GPU that an old kernel's actor still holds.
"""
from __future__ import annotations

import time

import ray

from hetlab.errors import HetlabError
from hetlab.vocab import ROLES

ROLE_LABEL = "hetlab-role"
SIMULATED_LABEL = "hetlab-simulated"  # set on practice stand-ins ("mac (simulated)")
ROLE_SLIVER = 0.001  # an actor asks for this much of its node's role resource (node has 1)


def role_label(role: str) -> dict:
    """Label selector for a role, e.g. ``{"hetlab-role": "mac"}`` (for Ray Train's ScalingConfig)."""
    if role not in ROLES:
        raise HetlabError(f"unknown role {role!r}: use one of {', '.join(ROLES)}.")
    return {ROLE_LABEL: role}


def role_resource(role: str) -> str:
    """Name of the custom resource a node of this role carries, e.g. ``hetlab-role:mac``."""
    return f"{ROLE_LABEL}:{role_label(role)[ROLE_LABEL]}"


def node_resources(role: str) -> dict:
    """The custom resources a node of this role is started with."""
    return {role_resource(role): 1.0}


def placement(role: str | None = None, *, gpu: bool = False) -> dict:
    """Keyword arguments for ``ActorClass.options(**...)`` that pin an actor to the machine of ``role``
    (notebook 03); ``gpu=True`` asks for its GPU. A role or GPU no live node has: one line now, not an
    actor left pending forever."""
    options: dict = {}
    if role is not None:
        options["resources"] = {role_resource(role): ROLE_SLIVER}
    if gpu:
        options["num_gpus"] = 1
    if not ray.is_initialized():
        return options
    alive = live_nodes(role)
    if role is not None and not alive:
        raise HetlabError(f"no live node has role {role!r}: start it with the command from "
                          f"`hetlab join`/`hetlab head`, or use PracticeCluster for practice.")
    if gpu and not any(n["Resources"].get("GPU", 0) >= 1 for n in alive):
        where = f"the {role!r} node" if role else "any live node"
        raise HetlabError(f"{where} has no GPU for Ray to give: use gpu=False (CPU/MPS) "
                          f"or start that node where `ray start` detects its GPU.")
    return options


def live_nodes(role: str | None = None) -> list[dict]:
    """Ray's live nodes now (``ray.nodes()`` entries), only those that carry ``role``'s resource if given."""
    return [n for n in ray.nodes()
            if n.get("Alive") and (role is None or n["Resources"].get(role_resource(role), 0) > 0)]


def joined(role: str, doing: str) -> tuple[list[dict], bool]:
    """The live nodes of ``role`` and whether they are practice stand-ins; or one line saying what
    ``doing`` needs first."""
    if not ray.is_initialized():
        raise HetlabError(f"{doing} needs the cluster: connect first (the_pair() or cluster.connect()).")
    nodes = live_nodes(role)
    if not nodes:
        raise HetlabError(f"no live node has the role {role!r}: join that machine first (notebook 04).")
    return nodes, any(n.get("Labels", {}).get(SIMULATED_LABEL) for n in nodes)


def node_name(labels: dict, fallback: str) -> str:
    """Learner-facing node name: its role, marked "(simulated)" on a practice stand-in."""
    role = labels.get(ROLE_LABEL)
    if not role:
        return fallback
    return f"{role} (simulated)" if labels.get(SIMULATED_LABEL) == "true" else role


# --- who holds a machine's GPU (notebooks 05, 06, 08) -------------------------------------------

RELEASE_WAIT_S = 10.0  # a GPU released just now (ray.kill is asynchronous) shows up free within this
SEE_HOLDERS = "`ray list actors --filter state=ALIVE` on the head lists what holds it"


def gpus_available(node_ids: list[str]) -> float | None:
    """GPUs free for a new actor now on these nodes (Ray's GCS view); None if Ray cannot say."""
    try:
        from ray._private.state import available_resources_per_node
        free = available_resources_per_node()
    except Exception:  # noqa: BLE001 - a Ray internal changed: skip the check, never block training
        return None
    return sum(free.get(i, {}).get("GPU", 0) for i in node_ids)


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
        where = f"the {role} machine" if role else "any node"
        found = [n for n in live_nodes(role) if n["Resources"].get("GPU", 0) >= 1]
        if not found:
            return  # placement() already said that no such node has a GPU
        nodes, total = [n["NodeID"] for n in found], sum(n["Resources"]["GPU"] for n in found)
        if total < len(names):
            raise HetlabError(f"workers {names} each ask for a GPU on {where}, which has "
                              f"{total:g}: give all but {total:g} of them device='cpu'.")
        while (free := gpus_available(nodes)) is not None and free < len(names):
            if time.monotonic() >= deadline:
                asks = f"workers {names} need" if len(names) > 1 else f"worker {names[0]!r} needs"
                raise HetlabError(f"{asks} the GPU on {where}, but another actor holds it: this kernel's earlier "
                                  f"training (training.shutdown(), or restart this kernel) or another notebook's "
                                  f"kernel (stop it), then run this again; {SEE_HOLDERS}.")
            time.sleep(0.25)
