"""Ray Train's TorchTrainer on a Mac and a CUDA desktop at once (notebook 07): the launch.

``train_mixed`` runs exactly ``hetlab.raytrain.loop.train_loop`` on every rank, with the
configuration of ``hetlab.raytrain.config`` (hetlab's exchange, no GPU request, a label per rank, a
pinned rendezvous, no retries), and turns a failed run into one line (``explain_failure``).
Checkpoints: Train needs a ``storage_path`` that every node can reach (NFS, a bucket) on a real
multi-node cluster; by default a temp dir here, allowed only when rank 0 runs on this machine. A
resume reads one here and hands it to every rank (``hetlab.raytrain.checkpoint``).
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch
from torch import nn

from hetlab.arithmetic.steady import samples_per_s
from hetlab.errors import HetlabError
from hetlab.raytrain import checkpoint
from hetlab.raytrain.config import (RENDEZVOUS_TIMEOUT_S, TRAIN_ENV, LoopConfig, check_cluster, loop_config,
                                    run_config, scaling_config, torch_config, train_env)
from hetlab.raytrain.loop import RankReport, rank_indices, train_loop, weights_digest
from hetlab.vocab import Ports

__all__ = ["RENDEZVOUS_TIMEOUT_S", "TRAIN_ENV", "LoopConfig", "RankReport", "RayTrainResult", "explain_failure",
           "rank_indices", "scaling_config", "torch_config", "train_env", "train_loop", "train_mixed", "weights_digest"]


# One line from the wall of text a failed ``TorchTrainer.fit()`` raises: hetlab's own check refused
# the run, gloo was asked to join a Mac and a Linux machine (it cannot), a rank's machine went away
# (a Mac asleep, a lost link), or the ranks could not reach each other (a firewall on the rendezvous port).
NETWORK_SIGNS = ("timed out", "wait timeout", "connect timeout", "connection refused", "socket", "tcpstore",
                 "rendezvous", "process group")
GLOO_SIGNS = ("unsupported gloo device", "unexpected opcode", "ss_family")  # gloo's two transports met
GONE_SIGNS = ("node has died", "actor died", "worker health check failed",  # a rank's machine left
              "failed to initialize")                                          # ... as the run started


def lost_ranks(text: str) -> list[int]:
    """The ranks whose error snippet says their machine or process went away."""
    snippets = re.findall(r"\[Rank (\d+) Error Snippet\]:(.*?)(?=\[Rank \d+ Error|$)", str(text), flags=re.S)
    return [int(rank) for rank, snippet in snippets if any(sign in snippet.lower() for sign in GONE_SIGNS)]


def explain_failure(text: str, port: int | None, timeout_s: int, roles: Sequence[str] = (),
                    backend: str = "hetlab") -> str:
    """One line from the wall of text a failed ``TorchTrainer.fit()`` raises (``roles``: each
    rank's machine, to name the one that went away). With ``backend="gloo"`` across two machines a
    timeout is gloo's too: a Mac's gloo and a Linux one wait for each other until it runs out."""
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
    if (backend == "gloo" and len(set(roles)) > 1 and network) or any(sign in lowered for sign in GLOO_SIGNS):
        return ("Ray Train run failed: gloo cannot join these ranks: it speaks another transport on macOS "
                "than on Linux (pytorch/pytorch#144851). Use hetlab's exchange, train_mixed's default "
                "backend='hetlab'.")
    gone = lost_ranks(text)
    if gone or (not network and any(sign in lowered for sign in GONE_SIGNS)):
        who = (", ".join(f"the {roles[r]} (rank {r})" if r < len(roles) else f"rank {r}" for r in gone)
               or "a rank's machine")
        return (f"Ray Train run failed: {who} went away (its Ray node or a rank's process died: a Mac "
                f"asleep, a lost link). A Ray Train run needs every rank: bring that machine back "
                f"(`hetlab.cluster.node_table()` shows it) and run again; the parameter server goes on "
                f"without it (notebook 08).")
    if network:
        port = port or Ports.train_rendezvous
        return (f"Ray Train's ranks could not connect to each other within {timeout_s} s: open TCP {port} "
                f"(the rendezvous store, on rank 0's machine) to the other machine's IP: `hetlab head` "
                f"prints the rule (Ray Train only).")
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b.*: ", line)]
    return f"Ray Train run failed: {(errors or lines or ['no reason given'])[-1]}"   # the innermost reason


@dataclass
class RayTrainResult:
    """A finished TorchTrainer run: per-rank reports, accuracy, timings, the checkpoint."""

    ranks: list[RankReport]
    accuracy: float
    loss: list[float]         # rank 0's global-batch loss per step
    fit_s: float              # TorchTrainer.fit() wall time, start-up included
    train_s: float            # the training loop alone (rank 0)
    allreduce_bytes_per_step: int
    model_name: str           # the network trained: a built-in name, or the factory's qualified name
    checkpoint_path: str | None = None  # the last checkpoint: resume_from= it to train on
    steps: int = 0
    checkpoints: list[str] = field(default_factory=list)  # every checkpoint of the run, by step
    step_s: list = field(default_factory=list)  # rank 0's seconds per step (hetlab.arithmetic.steady reads them)
    checked: dict = field(default_factory=dict)  # rank 0's accuracy checks (check_every=): {"checks", "every", "test_samples"}
    extra: dict = field(default_factory=dict)
    factory: object = field(default=None, repr=False)  # train_mixed's model= when it was a factory
    samples_per_s: float = field(init=False)  # every rank's samples ÷ train_s

    def __post_init__(self):
        self.samples_per_s = samples_per_s(sum(r.samples for r in self.ranks), self.train_s)

    @classmethod
    def read(cls, result, fit_s: float, steps: int, model, factory) -> "RayTrainResult":
        """From Ray Train's ``Result``: rank 0's metrics and the losses saved beside its checkpoint."""
        from hetlab.core.models import model_label

        m, path = result.metrics, result.checkpoint.path
        with open(os.path.join(path, checkpoint.LOSSES)) as f:
            loss = json.load(f)
        every = sorted(result.best_checkpoints or [], key=lambda reported: reported[1].get("step", 0))
        return cls(ranks=[RankReport(**r) for r in m["ranks"]], accuracy=m["accuracy"], loss=loss, fit_s=fit_s,
                   train_s=m["train_s"], allreduce_bytes_per_step=m["allreduce_bytes_per_step"],
                   checkpoint_path=path, steps=steps, model_name=model_label(model),
                   checkpoints=[c.path for c, _ in every], step_s=list(m.get("step_s", [])),
                   checked=dict(m.get("checked") or {}),
                   factory=None if isinstance(model, str) else factory)

    @property
    def weights_identical(self) -> bool:
        return len({r.weights_sha256 for r in self.ranks}) == 1


    def technique(self) -> dict:
        """This run's figures for the report (``hetlab.arithmetic.outcome``): a steady speed from rank 0's
        step times, efficiency against the ranks' own device speeds, the all-reduce's share, accuracy,
        its conditions (batch, split, roles, devices), and its time to target when the run was checked as it
        went (``check_every``: ``outcome.first_crossing``, as the parameter server's ``run_checked``)."""
        from hetlab.arithmetic import outcome
        from hetlab.ps.records import device_seconds
        batch = sum(r.batch_size for r in self.ranks)
        speed = outcome.speed_of(self.step_s or [self.train_s / max(self.steps, 1)] * max(self.steps, 1), batch)
        alone = sum(r.samples / b for r in self.ranks if (b := device_seconds(r)) > 0)
        spent = sum(device_seconds(r) + r.allreduce_s for r in self.ranks)
        ranks = sorted(self.ranks, key=lambda r: r.rank)
        return {"speed": speed.as_dict(), "efficiency": speed.samples_per_s / alone if alone else None,
                "sum_alone": alone, "comm_share": sum(r.allreduce_s for r in self.ranks) / spent if spent else None,
                "seconds": self.train_s, "accuracy": self.accuracy, "target": outcome.TARGET,
                **outcome.conditions([r.batch_size for r in ranks], [r.role for r in ranks], self.steps,
                                     sum(r.samples for r in ranks), [r.label for r in ranks]),
                **outcome.first_crossing(self.checked.get("checks", []), outcome.TARGET, self.checked.get("every"),
                                         self.checked.get("test_samples"))}

    def model(self) -> nn.Module:
        """The trained weights from rank 0's checkpoint, in a fresh network (``factory`` when the
        run trained your own model, else the built-in ``model_name``) on the CPU."""
        from hetlab.core.models import make_model

        model = make_model(self.factory if self.factory is not None else self.model_name)
        model.load_state_dict(torch.load(os.path.join(self.checkpoint_path, checkpoint.WEIGHTS),
                                         map_location="cpu", weights_only=True))
        return model


def remove_groups_since(before: set) -> None:
    """Remove the placement groups made since ``before`` (ids). Ray Train 2.60 leaves its ranks'
    group behind when a rank fails as the group starts (gloo refused, a rendezvous that timed out):
    the ranks' CPUs stay taken, and the next run waits for them until its start-up times out."""
    import ray
    from ray.util.placement_group import PlacementGroup

    for pg_id, info in ray.util.placement_group_table().items():
        if pg_id not in before and info.get("state") != "REMOVED":
            ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(pg_id)))


# train_data= / test_data= as tensors (x, y) or any map-style torch Dataset (default: MNIST,
# train_samples …); without test_data the result's accuracy is NaN.
def train_mixed(steps: int = 100, global_batch: int = 128, ratio: str | Sequence[float] = "auto",
                roles: Sequence[str] | None = ("desktop", "mac"), devices="auto", slowdowns=1.0,
                model="small", lr: float = 1e-3, seed: int = 0,
                train_samples: int | None = None, test_samples: int | None = None,
                storage_path: str | None = None, progress: bool = True,
                rendezvous_port: int | None = None,
                timeout_s: int = RENDEZVOUS_TIMEOUT_S, loss=None, train_data=None,
                test_data=None, checkpoint_every: int | None = None, resume_from=None,
                check_every: int | None = None, check_samples: int = 1000,
                backend: str = "hetlab") -> RayTrainResult:
    """Train on every role's machine with one TorchTrainer run of ``train_loop``; returns what each rank did.

    ``ratio="auto"`` splits the global batch by each rank's measured throughput (``[3, 1]``: directly);
    ``slowdowns`` (≥ 1 per rank) simulate slower devices. ``storage_path``: reachable by every node (default:
    a temp dir, only when rank 0 runs here). Ranks meet on ``rendezvous_port``, give up after ``timeout_s``.
    Own model and data: ``model=``, ``loss=``, ``train_data=``. Rank 0 checkpoints at the end (and every
    ``checkpoint_every`` steps); ``resume_from=`` a result or a checkpoint goes on from it to step ``steps``.
    ``check_every=K``: an untimed test on ``check_samples`` samples every K steps (the time to target).
    ``backend``: the ranks' exchange, ``"hetlab"`` (any pair) or ``"gloo"`` (ranks on one system only:
    gpu-check's card and CPU in one Linux box).
    """
    import ray
    from ray.train.torch import TorchTrainer

    cfg = loop_config(steps, global_batch, ratio, roles, devices, slowdowns, model, lr, seed, train_samples,
                      test_samples, progress, loss, train_data, test_data, checkpoint_every, check_every, check_samples)
    saved = None if resume_from is None else checkpoint.read(resume_from, cfg.model, steps, seed, global_batch)
    check_cluster(roles, storage_path)
    own = {"train_data": cfg.train_data, "test_data": cfg.test_data, "resume": saved}
    cfg = replace(cfg, **{k: ray.put(v) for k, v in own.items() if v is not None})  # into Ray's object store, once
    trainer = TorchTrainer(train_loop, train_loop_config={"loop": cfg},  # Ray Train's config is a dict
                           torch_config=torch_config(rendezvous_port, timeout_s, backend),
                           scaling_config=scaling_config(roles, len(cfg.slowdowns)),
                           run_config=run_config(storage_path))
    t0, groups = time.perf_counter(), set(ray.util.placement_group_table())
    try:
        with train_env():
            result = trainer.fit()
    except Exception as e:  # Train wraps worker errors; keep their one-line reason
        remove_groups_since(groups)
        raise HetlabError(explain_failure(str(e), rendezvous_port, timeout_s, roles or (), backend)) from None
    return RayTrainResult.read(result, time.perf_counter() - t0, steps, model, cfg.model)
