"""One model on one device (notebooks 01, 02): the one training step, the plain loop around it, and how
fast the step runs. ``train``, ``measure_speed`` and a worker timing itself all time ``train_step``.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from hetlab import progress_bar
from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, SteadySpeed, samples_per_s, steady, window_cuts
from hetlab.core import simulate
from hetlab.core.data import Dataset, as_tensors, batches
from hetlab.core.devices import resolve, synchronize
from hetlab.errors import HetlabError

TRAINING_OPTIMIZER = "adam"   # what hetlab trains with, so what a speed is measured with
LOSS_READS_PER_EPOCH = 2   # each read of the losses waits for the device


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """Adam, or plain SGD, over ``params``: ``name`` is one of ``vocab.OPTIMIZERS``, checked where it is given."""
    return (torch.optim.Adam if name == "adam" else torch.optim.SGD)(params, lr=lr)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, xb, yb) -> torch.Tensor:
    """Zero the gradients, forward, backward, optimizer step; returns the loss (on the device)."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss


@dataclass
class History:
    """What one training run did: per-step loss, per-epoch accuracy, speed and time split."""

    device: str = "cpu"
    loss: list[float] = field(default_factory=list)          # one per step
    test_accuracy: list[float] = field(default_factory=list)  # one per epoch
    samples: int = 0
    seconds_batching: float = 0.0
    seconds_compute: float = 0.0
    seconds_eval: float = 0.0
    samples_per_s: float = 0.0  # over the whole run, warm-up included, evaluation excluded (``steady``: without it)
    step_seconds: list[float] = field(default_factory=list, repr=False)  # each step's batching + compute
    step_samples: list[int] = field(default_factory=list, repr=False)    # each step's batch size

    @property
    def steady(self) -> SteadySpeed:
        """The steady speed (``hetlab.arithmetic.steady``): the warm-up apart, the rest in windows."""
        return steady(self.step_seconds, self.step_samples)

    @property
    def final_accuracy(self) -> float:
        return self.test_accuracy[-1] if self.test_accuracy else float("nan")


def held_out(test_data, n: int):
    """The test samples a run checks its accuracy on: ``n`` of a hetlab Dataset (seed 0), other data whole."""
    return test_data.subset(min(n, len(test_data)), seed=0) if isinstance(test_data, Dataset) else test_data


@torch.no_grad()
def evaluate(model: nn.Module, data, device=None) -> float:
    """Fraction of ``data`` that ``model`` classifies correctly, on ``device`` (default: where the model is)."""
    batch_size = 2000
    if device is None:
        dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    else:
        dev = resolve(device)
        model.to(dev)
    was_training = model.training
    model.eval()
    x, y = as_tensors(data)
    y = y.to(dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)   # counted on the device, read once
    for i in range(0, len(y), batch_size):
        correct += (model(x[i : i + batch_size].to(dev)).argmax(1) == y[i : i + batch_size]).sum()
    model.train(was_training)
    return correct.item() / len(y)


def train(model: nn.Module, train_data, test_data=None,
          epochs: int = 1, batch_size: int = 128, lr: float = 1e-3, device=None,
          seed: int = 0, progress: bool = True, schedule: str = "constant", loss=None,
          timing: bool = False) -> History:
    """Train ``model`` in place with Adam on ``train_data``; evaluate on ``test_data`` after each epoch.
    ``schedule="cosine"`` decays the rate to zero. ``timing=True`` waits for the device each step, to time
    batching apart from compute."""
    if not isinstance(model, nn.Module):
        raise HetlabError(f"train() takes a built network, e.g. make_model('small'), got {type(model).__name__}.")
    if epochs < 1:
        raise HetlabError(f"epochs must be at least 1, got {epochs}.")
    if schedule not in ("constant", "cosine"):
        raise HetlabError(f"unknown schedule {schedule!r}: use 'constant' or 'cosine'.")
    x, y = as_tensors(train_data)
    if not 1 <= batch_size <= len(y):
        raise HetlabError(f"batch size must be in 1..{len(y)}, got {batch_size}.")
    loss_fn = loss or nn.functional.cross_entropy
    dev = resolve(device)
    torch.manual_seed(seed)
    model.to(dev).train()
    opt = make_optimizer(TRAINING_OPTIMIZER, model.parameters(), lr)
    x, y = x.to(dev), y.to(dev)
    hist = History(device=str(dev))
    steps_per_epoch = -(-len(y) // batch_size)
    read_every = max(1, -(-steps_per_epoch // LOSS_READS_PER_EPOCH))
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
             if schedule == "cosine" else None)
    bar = progress_bar(epochs * steps_per_epoch, f"train on {dev}", progress)
    # wait where the warm-up and each window of ``History.steady`` end
    waits = set(window_cuts(epochs * steps_per_epoch - WARMUP_STEPS, WINDOWS, start=WARMUP_STEPS))
    seconds = hist.step_seconds
    for epoch in range(epochs):
        t, pending = time.perf_counter(), []
        for i, (xb, yb) in enumerate(batches(x, y, batch_size, shuffle=True, seed=seed, epoch=epoch)):
            t_batch = time.perf_counter()
            pending.append(train_step(model, opt, loss_fn, xb, yb))   # the loss, left on the device
            if sched is not None:
                sched.step()
            if timing or len(seconds) + 1 in waits:
                synchronize(dev)
            if len(pending) == read_every or i == steps_per_epoch - 1:   # a read waits for the device: compute
                with torch.no_grad():   # the losses keep their (freed) graphs: no detach per step, none here either
                    hist.loss += torch.stack(pending).float().tolist()
                pending.clear()
                bar.set_postfix(loss=f"{hist.loss[-1]:.3f}", refresh=False)
            t_done = time.perf_counter()
            hist.seconds_batching += t_batch - t
            hist.seconds_compute += t_done - t_batch
            seconds.append(t_done - t)
            hist.step_samples.append(yb.shape[0])
            bar.update(1)
            t = t_done
        hist.samples = sum(hist.step_samples)
        hist.samples_per_s = samples_per_s(hist.samples, hist.seconds_batching + hist.seconds_compute)
        if test_data is not None:
            t0 = time.perf_counter()
            hist.test_accuracy.append(evaluate(model, test_data, dev))
            hist.seconds_eval += time.perf_counter() - t0
            bar.set_postfix(loss=f"{hist.loss[-1]:.3f}", acc=f"{hist.test_accuracy[-1]:.4f}")
    bar.close()
    return hist


_WARM: set = set()   # the shape keys already run in this process


def warm_up(key, step, device) -> bool:
    """Run ``step()`` once, untimed, the first time ``key`` is seen here: MPS compiles a graph per shape."""
    if key in _WARM:
        return False
    step()
    synchronize(device)
    _WARM.add(key)
    return True


def shape_key(model: nn.Module, device, batch_size: int, *extra) -> tuple:
    """What makes a step's kernels new: device, the model's layers (not its weights), batch size."""
    return (str(torch.device(device)), repr(model), int(batch_size), *extra)


def measure_speed(model: nn.Module, device=None, batch_size: int = 128, steps: int = 10,
                  warmup: int | None = None, windows: int = WINDOWS) -> SteadySpeed:
    """The steady speed of ``steps`` training steps of ``model`` on ``device`` at ``batch_size`` (random
    MNIST-shaped data), in ``windows`` synchronised windows. ``warmup`` untimed steps first: by default
    ``WARMUP_STEPS`` the first time this process runs this shape, none after."""
    if batch_size < 1 or steps < 1:
        raise HetlabError(f"batch_size and steps must be at least 1 (got {batch_size}, {steps}).")
    dev = resolve(device)
    model = model.to(dev)
    opt = make_optimizer(TRAINING_OPTIMIZER, model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch_size,), device=dev)
    key = shape_key(model, dev, batch_size, TRAINING_OPTIMIZER)
    if warmup is None:
        warmup = 0 if key in _WARM else WARMUP_STEPS
    cuts = window_cuts(steps, max(1, min(windows, steps)))
    spans = [1] * warmup + [b - a for a, b in zip(cuts, cuts[1:])]   # steps per timed span
    seconds = timed_spans(lambda: train_step(model, opt, nn.functional.cross_entropy, x, y), dev, spans)
    if warmup > 0:
        _WARM.add(key)
    speed = steady(seconds, [batch_size * n for n in spans], warmup=warmup, windows=len(cuts) - 1)
    return dataclasses.replace(speed, steps=steps)


def timed_spans(step, device, spans: list[int], slow=None, work=None) -> list[float]:
    """The seconds of each span of ``spans[i]`` calls of ``step()``, the device synchronised at each span's
    end; with a ``simulate.SlowDevice``, each span's simulated wait for ``work`` counted in."""
    synchronize(device)
    seconds = []
    for n in spans:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        synchronize(device)
        compute_s = time.perf_counter() - t0
        seconds.append(compute_s if slow is None else simulate.device_seconds(compute_s, slow.after(work, compute_s)))
    return seconds
