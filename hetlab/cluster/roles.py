"""Each machine's role in the pair, and actors pinned to it (notebooks 03, 04).

Every hetlab node carries its *role* ("desktop" or "mac") twice: as a custom
resource (``hetlab-role:mac``, the robust pin for actors) and as a node label
(``hetlab-role=mac``, what Ray Train's ``ScalingConfig(label_selector=...)`` uses).
``placement(role)`` asks for a sliver of that resource, so an actor lands on its
machine and never where Ray happens to find room.
"""
from __future__ import annotations

import ray

from hetlab.errors import HetlabError
from hetlab.vocab import ROLES

ROLE_LABEL = "hetlab-role"
SIMULATED_LABEL = "hetlab-simulated"  # set on practice stand-ins ("mac (simulated)")
ROLE_SLIVER = 0.001  # an actor asks for this much of its node's role resource (node has 1)


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise HetlabError(f"unknown role {role!r}: use one of {', '.join(ROLES)}.")
    return role


def role_resource(role: str) -> str:
    """Name of the custom resource a node of this role carries, e.g. ``hetlab-role:mac``."""
    return f"{ROLE_LABEL}:{_check_role(role)}"


def role_label(role: str) -> dict:
    """Label selector for a role, e.g. ``{"hetlab-role": "mac"}`` (for Ray Train's ScalingConfig)."""
    return {ROLE_LABEL: _check_role(role)}


def node_labels(role: str, simulated: bool = False) -> dict:
    """The labels a node of this role is started with; practice stand-ins say they are simulated."""
    return {**role_label(role), **({SIMULATED_LABEL: "true"} if simulated else {})}


def node_resources(role: str) -> dict:
    """The custom resources a node of this role is started with."""
    return {role_resource(role): 1.0}


def placement(role: str | None = None, *, node_id: str | None = None, gpu: bool = False) -> dict:
    """Keyword arguments for ``ActorClass.options(**...)`` that pin an actor (notebook 03).

    ``role`` pins to the machine with that role, ``node_id`` to one exact node;
    ``gpu=True`` asks for the GPU so Ray accounts for it and keeps other GPU work
    off it. When Ray is connected, a role or GPU that no live node has fails now
    with a HetlabError instead of leaving the actor pending forever.
    """
    if role is not None and node_id is not None:
        raise HetlabError("give placement() a role or a node_id, not both.")
    options: dict = {}
    if role is not None:
        options["resources"] = {role_resource(role): ROLE_SLIVER}
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        try:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        except ValueError:
            raise HetlabError(f"node_id {node_id!r} is not a Ray node id: pick one from "
                              f"hetlab.cluster.nodes().") from None
    if gpu:
        options["num_gpus"] = 1
    if ray.is_initialized():
        _check_placeable(role, node_id, gpu)
    return options


def has_role(node: dict, role: str) -> bool:
    """Whether a ``ray.nodes()`` entry carries ``role``'s resource."""
    return node["Resources"].get(role_resource(role), 0) > 0


def live_nodes(role: str | None = None) -> list[dict]:
    """Ray's live nodes now (``ray.nodes()`` entries), only those with ``role`` when it is given:
    the one place that says where a role lives (placement, the search's slots, a lost machine)."""
    return [n for n in ray.nodes() if n.get("Alive") and (role is None or has_role(n, role))]


def joined(role: str, doing: str) -> tuple[list[dict], bool]:
    """The live nodes of ``role``, and whether they are practice stand-ins (simulated); or one line
    saying what ``doing`` needs first: the cluster connected, that machine joined (figures, link, machines)."""
    if not ray.is_initialized():
        raise HetlabError(f"{doing} needs the cluster: connect first (the_pair() or cluster.connect()).")
    nodes = live_nodes(role)
    if not nodes:
        raise HetlabError(f"no live node has the role {role!r}: join that machine first (notebook 04).")
    return nodes, any(n.get("Labels", {}).get(SIMULATED_LABEL) for n in nodes)


def _check_placeable(role, node_id, gpu) -> None:
    alive = live_nodes(role)
    if role is not None and not alive:
        raise HetlabError(f"no live node has role {role!r}: start it with the command from "
                          f"`hetlab join`/`hetlab head`, or use PracticeCluster for practice.")
    if node_id is not None:
        alive = [n for n in alive if n["NodeID"] == node_id]
        if not alive:
            raise HetlabError(f"no live node with id {node_id[:12]}…: pick one from hetlab.cluster.nodes().")
    if gpu and not any(n["Resources"].get("GPU", 0) >= 1 for n in alive):
        where = f"the {role!r} node" if role else "any live node"
        raise HetlabError(f"{where} has no GPU for Ray to give: use gpu=False (CPU/MPS) "
                          f"or start that node where `ray start` detects its GPU.")


def node_name(labels: dict, fallback: str) -> str:
    """Learner-facing node name: its role, marked "(simulated)" on a practice stand-in."""
    role = labels.get(ROLE_LABEL)
    if not role:
        return fallback
    return f"{role} (simulated)" if labels.get(SIMULATED_LABEL) == "true" else role
