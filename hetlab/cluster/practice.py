"""A real multi-node Ray cluster on one machine, for practice (notebooks 04, 05, 08): separate Ray nodes
(``ray.cluster_utils.Cluster``) with the roles ``hetlab head``/``join`` give the real machines; the
other machine's node is named simulated.
"""
from __future__ import annotations

import logging
import socket
import sys

import ray
from ray.cluster_utils import Cluster

from hetlab.cluster import connecting
from hetlab.cluster.roles import SIMULATED_LABEL, node_resources, role_label, role_resource
from hetlab import environment
from hetlab.errors import HetlabError
from hetlab.vocab import MAC_GLOO_STANDIN
from hetlab.cluster.connecting import start_with_retry, stop_children_since

REAL_HERE = {"mac"} if sys.platform == "darwin" else {"desktop"}  # the role this box honestly is

# Every practice node shares this machine's cores, so a node whose raylet answers Ray's health check
# late is busy, not lost: a check waits 30 s and 10 must be missed (Ray's default: 5 of 10 s).
PATIENT_HEALTH_CHECK = {"health_check_timeout_ms": 30_000, "health_check_failure_threshold": 10}


def display_name(role: str) -> str:
    """A practice node's name: ``"mac (simulated)"`` on Linux, ``"desktop (simulated)"`` on a Mac."""
    return role if role in REAL_HERE else f"{role} (simulated)"


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that are free on this machine right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class PracticeCluster:
    """Context manager: one small Ray node per role on this machine (one CPU, a 100 MB object store,
    token auth), the driver connected. The first role is the head; the others can be removed and
    re-added to practise losing a machine. ``accounted_gpus``, e.g. {"desktop": 1}: GPUs Ray counts,
    for scheduling only."""

    def __init__(self, roles=("desktop", "mac"), accounted_gpus: dict | None = None):
        roles = tuple(roles)
        if not roles or len(set(roles)) != len(roles):
            raise HetlabError(f"roles {roles!r} must be distinct and non-empty, e.g. ('desktop', 'mac').")
        for role in roles:
            role_resource(role)  # validates the role
        self.roles = roles
        self._nodes: dict = {}
        self._gpus = dict(accounted_gpus or {})  # role → GPUs Ray counts there; none is real
        if ray.is_initialized():
            ray.shutdown()  # a practice cluster replaces whatever this kernel was connected to
        connecting.enable_local_token_auth()  # token file created / made 0600
        self._local_cluster = Cluster(initialize_head=False, shutdown_at_exit=True)
        try:
            for role in roles:
                self.add_node(role)
            ray.init(address=self._local_cluster.address, logging_level=logging.WARNING)
        except BaseException:
            self.shutdown()
            raise

    def _node_args(self, role: str) -> dict:
        # Fixed agent ports: with port 0 the raylet waits for each agent to write its port to
        # a file and aborts after ~15 s, which a busy 2-core machine can exceed.
        agents = dict(zip(("metrics_agent_port", "runtime_env_agent_port",
                           "dashboard_agent_listen_port", "metrics_export_port"), free_ports(4)))
        simulated = {} if role in REAL_HERE else {SIMULATED_LABEL: "true"}
        args = dict(num_cpus=1, num_gpus=self._gpus.get(role, 0), object_store_memory=100 * 2**20, **agents,
                    resources=node_resources(role), labels={**role_label(role), **simulated},
                    include_dashboard=False, no_monitor=True)  # no autoscaler: fewer processes
        if self._local_cluster.head_node is None:  # the head's GCS watches every node
            args["_system_config"] = PATIENT_HEALTH_CHECK
        return args

    @property
    def address(self) -> str:
        """GCS address of the head node."""
        if self._local_cluster is None:
            raise HetlabError("this practice cluster is shut down: start a new PracticeCluster().")
        return self._local_cluster.address

    def node_id(self, role: str) -> str:
        """Ray node id of the node that plays ``role``."""
        if role not in self._nodes:
            raise HetlabError(f"no practice node has role {role!r} now (running: {sorted(self._nodes)}).")
        return self._nodes[role].node_id

    def add_node(self, role: str) -> str:
        """Start (or restart) the node for ``role``; returns its node id."""
        if self._local_cluster is None:
            raise HetlabError("this practice cluster is shut down: start a new PracticeCluster().")
        role_resource(role)
        if role in self._nodes:
            raise HetlabError(f"the {display_name(role)} node is already running.")
        def start() -> str:
            # the node's processes inherit the env; a simulated Mac's torch has no Linux gloo, as a Mac's
            with environment(MAC_GLOO_STANDIN if role == "mac" and role not in REAL_HERE else {}):
                self._nodes[role] = self._local_cluster.add_node(**self._node_args(role))
            return self._nodes[role].node_id

        def clean_up(started: float) -> None:  # a half-started node; the running ones stay
            keep = {info.process.pid for node in self._nodes.values()
                    for infos in node.all_processes.values() for info in infos}
            stop_children_since(started, keep=keep)

        return start_with_retry(start, clean_up, lambda exc, timed_out: HetlabError(
            f"the {display_name(role)} practice node did not start in time (this machine is busy): "
            f"close other Ray sessions and run this again.") if timed_out else None)

    def remove_node(self, role: str) -> None:
        """Stop the node for ``role`` (its actors die), as if that machine went away."""
        if role not in self._nodes:
            raise HetlabError(f"no practice node has role {role!r} now (running: {sorted(self._nodes)}).")
        if self._nodes[role] is self._local_cluster.head_node:
            raise HetlabError(f"the {display_name(role)} node is the head (the driver connects through "
                              f"it): remove another role, or put this role later in roles=.")
        self._local_cluster.remove_node(self._nodes.pop(role))

    def shutdown(self) -> None:
        """Disconnect the driver and stop every node; safe to call twice."""
        if ray.is_initialized():
            ray.shutdown()
        if getattr(self, "_local_cluster", None) is not None:
            self._local_cluster.shutdown()
            self._local_cluster = None
        self._nodes = {}

    def __enter__(self) -> "PracticeCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        running = ", ".join(display_name(r) for r in self._nodes) or "shut down"
        return f"PracticeCluster({running})"
