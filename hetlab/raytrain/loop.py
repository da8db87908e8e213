"""The loop every rank runs inside Ray Train's ``TorchTrainer`` (notebook 07 shows it).

Each rank picks its device on its own machine and trains its share b_i of each global batch B; once
per step it SUM all-reduces (b_i / B) · its gradient as one flat CPU buffer through hetlab's exchange,
so every rank applies Σ (b_i / B) · g_i. Rank 0 reports its weights and losses as Ray Train's checkpoint.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

from hetlab.core.devices import resolve, synchronize
from hetlab.core.machine import origin_label
from hetlab.core.flat import flat_grad, set_flat_grad
from hetlab.core.models import make_model
from hetlab.core.train import evaluate
from hetlab.raytrain.config import LoopConfig
from hetlab.core.simulate import SlowDevice, device_seconds, labelled

MODEL = "small"                               # the course's CNN (hetlab.core.models)
WEIGHTS, LOSSES = "model.pt", "loss.json"   # rank 0's checkpoint: what RayTrainResult reads back


def train_loop(config: dict) -> None:
    """What every rank runs: its own device, its own share of the batch, one weighted all-reduce."""
    import ray.train

    cfg = config["loop"]                                      # the LoopConfig train_mixed checked
    rank = ray.train.get_context().get_world_rank()
    role = cfg.roles[rank]                                    # its node, by the label ScalingConfig asked for
    device = resolve(cfg.devices[rank])                       # "auto": cuda, mps or cpu, on this machine
    train = mnist(cfg, "train")
    x, y = train.normalized().to(device), train.labels.to(device)
    sizes, speed = agree_on_split(cfg, rank, device)          # the same b_i on every rank
    share = sizes[rank] / cfg.global_batch                    # b_i / B
    model = make_model(MODEL, seed=cfg.seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = RankLog(device, cfg.slowdowns[rank])
    for step in range(cfg.steps):
        idx = rank_indices(step, sizes, rank, len(y), cfg.seed).to(device)
        with log.compute(work=sizes[rank]):                   # a simulated slower device sleeps after it
            opt.zero_grad(set_to_none=False)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
        with log.allreduce():                                 # one flat CPU buffer: b_i/B × (gradient, loss)
            buf = torch.cat([flat_grad(model), loss.detach().float().cpu().view(1)]) * share
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)        # now Σ (b_i/B)·g_i on every rank
            set_flat_grad(model, buf[:-1])                    # back onto this rank's device
        with log.compute():
            opt.step()
        log.loss(buf[-1].item())                              # the global batch's loss, for free
    report(cfg, model, rank, role, device, sizes[rank], speed, log)


def rank_indices(step: int, batch_sizes: Sequence[int], rank: int, n_samples: int,
                 seed: int = 0) -> torch.Tensor:
    """Which samples rank ``rank`` trains at ``step``: its share of positions [t·B, (t+1)·B) of the
    shuffled stream, cut as the parameter server cuts its steps (rank i and worker i train the same samples)."""
    from hetlab.core.stream import split_spans, stream_indices

    total = sum(batch_sizes)
    return stream_indices(n_samples, seed, split_spans([(step * total, total)], batch_sizes)[rank])


def mnist(cfg: LoopConfig, split: str):
    """MNIST's ``"train"`` or ``"test"`` set, or ``cfg``'s part of it (``train_samples``, ``test_samples``)."""
    from hetlab.core.data import load_mnist

    data, part = load_mnist(split), cfg.train_samples if split == "train" else cfg.test_samples
    return data.subset(part, seed=cfg.seed) if part else data


def agree_on_split(cfg: LoopConfig, rank: int, device) -> tuple[list[int], float]:
    """Each rank measures its own samples/s (a simulated slowdown divides it), the ranks swap the
    numbers, and every rank derives the same split of the global batch: (sizes, this rank's speed)."""
    from hetlab.arithmetic.balance import split_batch
    from hetlab.core.train import measure_speed

    world, batch = dist.get_world_size(), cfg.global_batch
    speed = measure_speed(make_model(MODEL, seed=cfg.seed), device, batch_size=max(1, batch // world),
                          steps=5).samples_per_s / cfg.slowdowns[rank]
    speeds = [None] * world
    dist.all_gather_object(speeds, speed)
    return list(cfg.batch_sizes) if cfg.batch_sizes else split_batch(batch, speeds, world), speed


@dataclass
class RankLog:
    """Where one rank's time went (compute, simulated sleep, all-reduce with its wait), each step's
    seconds and its losses."""

    device: torch.device
    slowdown: float = 1.0
    compute_s: float = 0.0
    simulated_s: float = 0.0
    allreduce_s: float = 0.0
    losses: list = field(default_factory=list)    # every step's global-batch loss
    step_s: list = field(default_factory=list)    # each step's seconds: their sum is the training time
    step_start: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self._slow = SlowDevice(self.slowdown)

    @contextmanager
    def compute(self, work=None):
        """Work on the device, timed to its end; after ``work`` a simulated slower device sleeps."""
        t0 = time.perf_counter()
        yield
        synchronize(self.device)
        self.compute_s += time.perf_counter() - t0
        if work is not None:
            self.simulated_s += self._slow.after(work, time.perf_counter() - t0)

    @contextmanager
    def allreduce(self):
        t0 = time.perf_counter()
        yield
        self.allreduce_s += time.perf_counter() - t0

    def loss(self, value: float) -> None:
        """The step's end: its loss, and its seconds since the last step ended."""
        self.losses.append(value)
        now = time.perf_counter()
        self.step_s.append(now - self.step_start)
        self.step_start = now


@dataclass
class RankReport:
    """What one rank did: where it ran, its batch, and where its time went."""

    rank: int
    role: str
    label: str                # says "simulated" when slowdown > 1
    node_id: str
    device: str
    batch_size: int
    samples_per_s: float      # its device's speed, measured before the run (the split's)
    samples: int
    compute_s: float          # forward, backward and optimizer step on the device
    simulated_s: float        # the simulated slowdown's sleep
    allreduce_s: float        # flattening, the all-reduce, and waiting for the other rank
    weights_sha256: str

    @property
    def device_s(self) -> float:
        """Its device's time: compute + the simulated sleep (``simulate.device_seconds``)."""
        return device_seconds(self.compute_s, self.simulated_s)


def weights_digest(model: nn.Module) -> str:
    """sha256 of all parameters' bytes: equal digests mean bitwise-equal weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def report(cfg: LoopConfig, model, rank, role, device, batch_size, speed, log: RankLog) -> None:
    """Every rank's ``RankReport`` to rank 0, which tests the model and reports the metrics with its
    checkpoint; the others report nothing (Ray Train's report waits for every rank)."""
    import ray
    import ray.train

    label = labelled(f"{role} · {device.type}", log.slowdown)  # the parameter server's label format
    if origin := origin_label():
        label += f" ({origin})"
    mine = RankReport(rank, role, label, ray.get_runtime_context().get_node_id(), str(device), batch_size, speed,
                      batch_size * cfg.steps, log.compute_s, log.simulated_s, log.allreduce_s, weights_digest(model))
    reports = [None] * dist.get_world_size()
    dist.all_gather_object(reports, asdict(mine))
    if rank != 0:
        ray.train.report({"rank": rank})
        return
    metrics = {"ranks": reports, "accuracy": evaluate(model, mnist(cfg, "test"), device),
               "train_s": sum(log.step_s), "step_s": list(log.step_s)}
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(tmp, WEIGHTS))
        with open(os.path.join(tmp, LOSSES), "w") as f:
            json.dump(log.losses, f)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))

