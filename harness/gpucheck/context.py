"""What the harness's GPU checks share (``python -m harness.gpucheck``): how much each runs (``Sizes``,
hetlab's with the pair's and the options' counts: ``FULL``, ``QUICK``, and the dry run's ``STAND_IN``),
the unlike pair in one box (a "desktop" worker on the card, a "mac" worker on this machine's CPU) and
its arithmetic, and ``Context``: data, the pair's practice cluster, the single-device reference and
the accuracy runs, each made once on first use so that ``--only`` runs any check alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from hetlab.errors import HetlabError
from hetlab.tools import gpucheck
from hetlab.tools.gpucheck import Goal

ACCURACY_TOLERANCE = 0.005  # a pair's accuracy may trail the single-device run's by 0.5 points


def accuracy_goal(reference: float, tolerance: float = ACCURACY_TOLERANCE) -> Goal:
    return Goal(">=", reference - tolerance,
                f"≥ single-device {reference:.2%} − {tolerance * 100:g} pt")


# --- the pair's arithmetic and plan (pure) -----------------------------------------------------

def pair_efficiency(together: float, alone_before: list[float], alone_after: list[float]) -> float:
    """Together ÷ Σ standalone, each standalone the mean of before and after (drift hits both)."""
    from hetlab.arithmetic.balance import efficiency
    alone = [(a + b) / 2 for a, b in zip(alone_before, alone_after, strict=True)]
    return efficiency(together, alone)


def pair_batch_for(speed: float, step_s: float, floor: int, bytes_per_sample: float | None = None,
                   memory: float | None = None) -> int:
    """The efficiency run's global batch: the card's ideal step about ``step_s`` long at its
    ``speed`` (samples/s alone), at least ``floor``, within a quarter of ``memory`` (bytes) at
    ``bytes_per_sample`` (a training step's peak); a multiple of 1024.

    Why sized to the card: a synchronous step pays a few ms of Ray messages and the update
    whatever its size, so on a card that trains ~800,000 samples/s (an H100, this small model)
    a 16,384 batch is a 20 ms step and loses a fifth of it; the same batch is a far longer step
    on a slower card."""
    batch = max(floor, speed * step_s)
    if bytes_per_sample and memory:
        batch = min(batch, memory / 4 / bytes_per_sample)
    return max(1024, int(batch) // 1024 * 1024)


def pair_workers(device: str = "cuda") -> list:
    """The unlike pair in one box: "desktop" on ``device`` (the card), "mac" on the CPU."""
    from hetlab.ps.specs import WorkerSpec
    return [WorkerSpec("desktop", role="desktop", device=device),
            WorkerSpec("mac", role="mac", device="cpu")]


def pair_placements(workers: list) -> dict[str, dict]:
    """Per worker, the Ray actor options the parameter server gives it (``ps.specs.actor_options``):
    the worker on the card asks for ``num_gpus=1``, the CPU worker asks for none."""
    from hetlab.ps.specs import actor_options
    return {w.name: actor_options(w) for w in workers}


# --- sizes ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes(gpucheck.Sizes):
    """hetlab's sizes of the card's own checks, and how much the benchmark, the pair and the plain loop
    at 128 run."""

    bench_samples: int = 12000       # benchmarks/single_device.py --samples
    bench_repeats: int = 3
    pair_batch: int | None = None    # global batch of the efficiency run; None: sized to the card (pair_batch_for)
    pair_step_s: float = 0.1         # ... so that its ideal step is about this long
    pair_short_batch: int = 16384    # and an info row at this batch: a short step on a fast card
    pair_steps: int = 6              # measured steps per standalone / tuning round
    pair_rounds: int = 6             # auto-tune rounds at most
    pair_repeats: int = 8            # the tuned split runs pair_repeats × pair_steps steps (a GPU step is ms)
    train_samples: int = 60000       # the pair's accuracy runs and their single-device reference
    test_samples: int = 10000
    acc_batch: int = 128             # global batch of the accuracy runs
    acc_epochs: int = 2
    plain_samples: int = 30000       # the plain loop's run (check_train_128): samples a pass, batch 128
    plain_epochs: int = 1


FULL = Sizes()
QUICK = replace(FULL, **{k: getattr(gpucheck.QUICK, k) for k in ("sweep_batches", "sweep_steps")}, bench_repeats=2,
                pair_steps=4, pair_rounds=5, pair_repeats=6, acc_epochs=1, plain_samples=24000)
# The dry run's (``--stand-in``): every check's code path on a CPU, at sizes of seconds.
STAND_IN = replace(QUICK, bench_samples=1100, bench_repeats=1, nb01_train=2000, nb01_test=500, nb01_epochs=1,
                   nb01_target=0.5, pair_batch=1024, pair_step_s=0.01, pair_short_batch=128, pair_steps=2,
                   pair_rounds=2, pair_repeats=1, train_samples=2000, test_samples=500, acc_batch=64,
                   sweep_batches=(1, 16), sweep_steps=2,
                   plain_samples=1280)


# --- what the checks share ----------------------------------------------------------------------

class Context(gpucheck.Context):
    """hetlab's context (device, sizes) and, made on first use: data, the practice cluster of the pair,
    the single-device reference, the accuracy runs' tuned split and their results (so ``--only`` works alone)."""

    def __init__(self, device: str, sizes: Sizes, stand_in: bool = False):
        super().__init__(device, sizes)
        self.stand_in = stand_in
        # the desktop worker's device: as a stand-in "auto", so that it asks Ray for the counted GPU as on the card
        self.worker_device = "auto" if stand_in else device
        self._cluster = None
        self._cache: dict = {}

    def cached(self, key, make: Callable):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def train_data(self):
        from hetlab.core.data import load_mnist
        n = self.sizes.train_samples
        return self.cached("train", lambda: load_mnist("train") if n >= 60000
                           else load_mnist("train").subset(n, seed=0))

    def test_data(self):
        from hetlab.core.data import load_mnist
        n = self.sizes.test_samples
        return self.cached("test", lambda: load_mnist("test") if n >= 10000
                           else load_mnist("test").subset(n, seed=0))

    @property
    def acc_steps(self) -> int:
        return self.sizes.acc_epochs * (len(self.train_data()) // self.sizes.acc_batch)

    def cluster(self):
        """Two practice nodes here, "desktop" and "mac"; the desktop's Ray counts the real card (or, as a
        stand-in, one GPU that is not there: the placement runs as on the card, the worker on the CPU)."""
        if self._cluster is None:
            from hetlab.cluster.practice import PracticeCluster
            gpus = {"desktop": 1} if torch.device(self.device).type == "cuda" or self.stand_in else None
            self._cluster = PracticeCluster(("desktop", "mac"), accounted_gpus=gpus)
        return self._cluster

    def reference(self) -> float:
        """Single-device accuracy on the pair's samples: same data, global batch, epochs, Adam."""
        def make():
            from hetlab.core.models import make_model
            from hetlab.core.train import train
            hist = train(make_model("small", seed=0), self.train_data(), self.test_data(),
                         epochs=self.sizes.acc_epochs, batch_size=self.sizes.acc_batch,
                         device=self.device, seed=0, progress=False)
            return hist.final_accuracy
        return self.cached("reference", make)

    def accuracy_split(self, training=None) -> list[int]:
        """Batch sizes of the accuracy runs: auto-tuned at their global batch (fp32), on the
        running pair ``training`` if given (its weights move on: not an accuracy run), else on
        a pair started for it."""
        from hetlab.arithmetic.balance import auto_tune, split_batch
        from hetlab.ps import ParameterServerTraining
        b, s = self.sizes.acc_batch, self.sizes

        def tune(run):
            return auto_tune(lambda sizes: run.measure(sizes, steps=s.pair_steps), b, 2,
                             rounds=s.pair_rounds).batch_sizes

        def make():
            if training is not None:
                return tune(training)
            self.cluster()
            with ParameterServerTraining(pair_workers(self.worker_device), self.train_data(), seed=0,
                                         progress=False, batch_sizes=split_batch(b, [1, 1])) as run:
                return tune(run)
        return self.cached("split", make)

    def ps_run(self, transfer: str = "fp32") -> dict:
        """One accuracy run of the pair through the parameter server (sync, tuned split)."""
        def make():
            from hetlab.ps import ParameterServerTraining
            from hetlab.ps.records import cluster_samples_per_s
            sizes = self.accuracy_split()
            self.cluster()
            with ParameterServerTraining(pair_workers(self.worker_device), self.train_data(),
                                         seed=0, progress=False, transfer=transfer,
                                         batch_sizes=sizes) as run:
                records = run.run(self.acc_steps)
                losses = [r.loss for r in records]
                return {"accuracy": run.evaluate(self.test_data()), "labels": run.labels,
                        "batch_sizes": sizes, "samples": run.samples_seen,
                        "samples_per_s": cluster_samples_per_s(records),
                        "bytes_to_server_per_sample": run.bytes_to_server / run.samples_seen,
                        "losses_finite": all(math.isfinite(x) for x in losses)}
        return self.cached(("ps", transfer), make)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None


def require(condition: bool, message: str) -> None:
    """A check's precondition (the worker really on the card, …): if false, the row is an error."""
    if not condition:
        raise HetlabError(message)
