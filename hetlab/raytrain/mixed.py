"""Ray Train's TorchTrainer on a Mac and a CUDA desktop at once (notebook 07): ``train_mixed`` runs
``hetlab.raytrain.loop.train_loop`` on every rank with ``hetlab.raytrain.config``'s settings, and
turns a failed run into one line (``explain_failure``).
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import nn

from hetlab.errors import HetlabError
from hetlab.raytrain.config import (RENDEZVOUS_TIMEOUT_S, check_cluster, loop_config, run_config,
                                    scaling_config, torch_config, train_env)
from hetlab.raytrain.loop import LOSSES, MODEL, WEIGHTS, RankReport, train_loop, weights_digest
from hetlab.vocab import Ports

__all__ = ["RayTrainResult", "explain_failure", "scaling_config", "train_mixed", "weights_digest"]


# Signs, in the wall of text a failed ``TorchTrainer.fit()`` raises, that a rank's machine went away
# (a Mac asleep, a lost link) or that the ranks could not reach each other (a firewall on the rendezvous port).
NETWORK_SIGNS = ("timed out", "wait timeout", "connect timeout", "connection refused", "socket", "tcpstore",
                 "rendezvous", "process group")
GONE_SIGNS = ("node has died", "actor died", "worker health check failed",  # a rank's machine left
              "failed to initialize")                                          # ... as the run started


def explain_failure(text: str, roles: Sequence[str] = ()) -> str:
    """One line from the wall of text a failed ``TorchTrainer.fit()`` raises (``roles``: each
    rank's machine, to name the one that went away)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    hetlab_line = next((line for line in lines if "HetlabError" in line), None)
    if hetlab_line:
        return f"Ray Train run failed: {hetlab_line}"
    lowered = " ".join(lines).lower()
    if "worker group startup timed out" in lowered:
        return ("Ray Train run failed: its ranks did not get their CPUs in time: a machine has no free CPU for a "
                "rank (another run or a notebook still holds it) or its node is gone: `hetlab.cluster.node_table()` "
                "shows the nodes; stop the other work and run again.")
    network = any(sign in lowered for sign in NETWORK_SIGNS)
    snippets = re.findall(r"\[Rank (\d+) Error Snippet\]:(.*?)(?=\[Rank \d+ Error|$)", str(text), flags=re.S)
    gone = [int(r) for r, snippet in snippets if any(sign in snippet.lower() for sign in GONE_SIGNS)]
    if gone or (not network and any(sign in lowered for sign in GONE_SIGNS)):
        who = ", ".join(f"the {roles[r]} (rank {r})" if r < len(roles) else f"rank {r}" for r in gone) \
            or "a rank's machine"
        return (f"Ray Train run failed: {who} went away (its Ray node or a rank's process died: a Mac "
                f"asleep, a lost link). A Ray Train run needs every rank: bring that machine back "
                f"(`hetlab.cluster.node_table()` shows it) and run again; the parameter server goes on "
                f"without it (notebook 08).")
    if network:
        return (f"Ray Train's ranks could not connect to each other within {RENDEZVOUS_TIMEOUT_S} s: open TCP "
                f"{Ports.train_rendezvous} "
                f"(the rendezvous store, on rank 0's machine) to the other machine's IP: `hetlab head` "
                f"prints the rule (Ray Train only).")
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b.*: ", line)]
    return f"Ray Train run failed: {(errors or lines or ['no reason given'])[-1]}"   # the innermost reason


@dataclass
class RayTrainResult:
    """A finished TorchTrainer run: per-rank reports, accuracy, timings, rank 0's checkpoint."""

    ranks: list[RankReport]
    accuracy: float
    loss: list[float]         # rank 0's global-batch loss per step
    fit_s: float              # TorchTrainer.fit() wall time, start-up included
    train_s: float            # the training loop alone (rank 0)
    checkpoint_path: str      # rank 0's weights and losses at the end
    steps: int = 0
    step_s: list = field(default_factory=list)  # rank 0's seconds per step (hetlab.arithmetic.steady reads them)

    @classmethod
    def read(cls, result, fit_s: float, steps: int) -> "RayTrainResult":
        """From Ray Train's ``Result``: rank 0's metrics and the losses saved beside its checkpoint."""
        m, path = result.metrics, result.checkpoint.path
        with open(os.path.join(path, LOSSES)) as f:
            loss = json.load(f)
        return cls(ranks=[RankReport(**r) for r in m["ranks"]], accuracy=m["accuracy"], loss=loss, fit_s=fit_s,
                   train_s=m["train_s"], checkpoint_path=path, steps=steps, step_s=list(m["step_s"]))

    @property
    def weights_identical(self) -> bool:
        return len({r.weights_sha256 for r in self.ranks}) == 1

    def technique(self) -> dict:
        """This run's figures for the report, as the parameter server's (``outcome.technique``): one
        record per rank and step, each rank's device and all-reduce seconds spread over its steps."""
        from types import SimpleNamespace

        from hetlab.arithmetic import outcome
        n = len(self.step_s)
        records = [SimpleNamespace(step=i, step_s=s, worker=r.role, samples=r.batch_size, batch_size=r.batch_size,
                                   device_s=r.device_s / n, comm_s=r.allreduce_s / n, wait_s=0.0)
                   for i, s in enumerate(self.step_s) for r in self.ranks]
        return outcome.technique(records, self.accuracy, devices=[r.label for r in self.ranks])

    def model(self) -> nn.Module:
        """The trained weights from rank 0's checkpoint, in a fresh network on the CPU."""
        from hetlab.core.models import make_model

        model = make_model(MODEL)
        model.load_state_dict(torch.load(os.path.join(self.checkpoint_path, WEIGHTS),
                                         map_location="cpu", weights_only=True))
        return model


def remove_groups_since(before: set) -> None:
    """Remove the placement groups made since ``before`` (ids). Ray Train 2.60 leaves its ranks'
    group behind when a rank fails as the group starts (a rendezvous that timed out): the ranks'
    CPUs stay taken, and the next run waits for them until its start-up times out."""
    import ray
    from ray.util.placement_group import PlacementGroup

    for pg_id, info in ray.util.placement_group_table().items():
        if pg_id not in before and info.get("state") != "REMOVED":
            ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(pg_id)))


def train_mixed(steps: int = 100, global_batch: int = 128, batch_sizes="auto",
                roles: Sequence[str] = ("desktop", "mac"), devices="auto", slowdowns=1.0,
                seed: int = 0, train_samples: int | None = None, test_samples: int | None = None,
                storage_path: str | None = None) -> RayTrainResult:
    """Train the course's CNN on MNIST on every role's machine with one TorchTrainer run of ``train_loop``.
    ``batch_sizes="auto"``: split by each rank's measured speed; ``slowdowns`` (≥ 1 per rank) simulate
    slower devices; ``storage_path``: reachable by every node (default: a temp dir, if rank 0 runs here)."""
    import ray
    from ray.train.torch import TorchTrainer

    cfg = loop_config(steps, global_batch, batch_sizes, roles, devices, slowdowns, seed, train_samples,
                      test_samples)
    scaling = scaling_config(roles)       # an unknown role fails here, before Ray is asked
    check_cluster(roles, storage_path)
    trainer = TorchTrainer(train_loop, train_loop_config={"loop": cfg},  # Ray Train's config is a dict
                           torch_config=torch_config(), scaling_config=scaling,
                           run_config=run_config(storage_path))
    t0, groups = time.perf_counter(), set(ray.util.placement_group_table())
    try:
        with train_env():
            result = trainer.fit()
    except Exception as e:  # Train wraps worker errors; keep their one-line reason
        remove_groups_since(groups)
        raise HetlabError(explain_failure(str(e), roles)) from None
    return RayTrainResult.read(result, time.perf_counter() - t0, steps)
