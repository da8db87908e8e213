"""Train and evaluate one model on one device (notebook 01).

The whole training set is moved to the device once, as normalised float tensors;
each step then slices a batch from it. ``History`` records what a learner wants to
see: loss per step, test accuracy per epoch, samples per second, and where the
time went (batching, compute, evaluation).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from hetlab import progress_bar
from hetlab.core.data import Dataset, as_tensors, batches
from hetlab.core.devices import resolve, synchronize
from hetlab.errors import HetlabError
from hetlab.core.models import as_factory, as_loss, check_model_and_loss, make_model
from hetlab.core.train_step import train_step
from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS, SteadySpeed, samples_per_s, steady, window_cuts


def steady_cuts(steps: int) -> tuple[int, int]:
    """(warm-up steps, windows) for a run of ``steps`` steps: ``WARMUP_STEPS`` and ``WINDOWS`` where it is
    long enough, else fewer (at least one timed step)."""
    windows = max(1, min(WINDOWS, steps - 1))
    return max(0, min(WARMUP_STEPS, steps - windows)), windows


def _sync_points(steps: int) -> set[int]:
    """After which steps (counted from 1) ``train`` waits for the device: the warm-up's end and each window's
    end, so that on a GPU each window's seconds hold its own work (a few waits a run)."""
    warmup, windows = steady_cuts(steps)
    timed = steps - warmup
    return set(window_cuts(timed, windows, start=warmup)) - {0}


@dataclass
class History:
    """What one training run did: per-step loss, per-epoch accuracy, speed and time split."""

    device: str = "cpu"
    loss: list[float] = field(default_factory=list)          # one per step
    lr: list[float] = field(default_factory=list)            # learning rate used at each step
    test_accuracy: list[float] = field(default_factory=list)  # one per epoch
    samples: int = 0
    seconds_batching: float = 0.0
    seconds_compute: float = 0.0
    seconds_eval: float = 0.0
    samples_per_s: float = 0.0  # over the whole run, warm-up included, evaluation excluded (``steady``: without it)
    model: nn.Module | None = field(default=None, repr=False)  # the trained network
    step_seconds: list[float] = field(default_factory=list, repr=False)  # each step's batching + compute
    step_samples: list[int] = field(default_factory=list, repr=False)    # each step's batch size
    epoch_steps: list[int] = field(default_factory=list, repr=False)     # steps per epoch

    @property
    def steady(self) -> SteadySpeed:
        """The steady speed (``hetlab.arithmetic.steady``): the first ``WARMUP_STEPS`` steps apart (their
        seconds in ``.warmup_s``), the rest in ``WINDOWS`` windows; fewer of each in a run of a few steps.
        Evaluation is never in it."""
        if not self.step_seconds:
            raise HetlabError("History.steady: this run trained no step.")
        warmup, windows = steady_cuts(len(self.step_seconds))
        return steady(self.step_seconds, self.step_samples, warmup=warmup, windows=windows)

    @property
    def epoch_samples_per_s(self) -> list[float]:
        """Each epoch's samples/s (evaluation excluded): the first holds the warm-up, the next ones do not."""
        rates, i = [], 0
        for n in self.epoch_steps:
            seconds = sum(self.step_seconds[i:i + n])
            rates.append(samples_per_s(sum(self.step_samples[i:i + n]), seconds))
            i += n
        return rates

    @property
    def final_accuracy(self) -> float:
        return self.test_accuracy[-1] if self.test_accuracy else float("nan")


def held_out(test_data, n: int):
    """The test samples a run checks its accuracy on while it trains (its time to target, notebooks 05,
    07, 08): ``n`` of a hetlab Dataset, the same ``n`` for every run (seed 0); other data whole."""
    return test_data.subset(min(n, len(test_data)), seed=0) if isinstance(test_data, Dataset) else test_data


@torch.no_grad()
def evaluate(model: nn.Module, data, device=None) -> float:
    """Fraction of ``data`` (a hetlab Dataset, ``(x, y)`` tensors or a map-style torch
    Dataset) that ``model`` classifies correctly, on ``device`` (the model moves there, as
    ``train`` moves it); by default on the device the model is on. 2,000 samples at a time."""
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
        out = model(x[i : i + batch_size].to(dev))
        correct += (out.argmax(1) == y[i : i + batch_size]).sum()
    model.train(was_training)
    return correct.item() / len(y)


def train(model, train_data, test_data=None,
          epochs: int = 1, batch_size: int = 128, lr: float = 1e-3, device=None,
          seed: int = 0, progress: bool = True, schedule: str = "constant", loss=None,
          timing: bool = False) -> History:
    """Train ``model`` with Adam on ``train_data``; evaluate on ``test_data`` after each epoch.

    ``model``: an ``nn.Module`` (trained in place) or a built-in name / factory (built with ``seed``;
    then ``History.model``). Data: a hetlab Dataset, ``(x, y)`` or a map-style torch Dataset.
    ``schedule="cosine"`` decays the rate to zero: the last epochs settle (≥ 99 %). Losses stay on the
    device, read ``LOSS_READS_PER_EPOCH`` times an epoch; ``timing=True`` waits for the device each step
    to time batching apart from compute (notebook 01; on a GPU it costs speed)."""
    if epochs < 1:
        raise HetlabError(f"epochs must be at least 1, got {epochs}.")
    if schedule not in ("constant", "cosine"):
        raise HetlabError(f"unknown schedule {schedule!r}: use 'constant' or 'cosine'.")
    x, y = as_tensors(train_data)
    if not 1 <= batch_size <= len(y):
        raise HetlabError(f"batch size must be in 1..{len(y)}, got {batch_size}.")
    loss_fn = as_loss(loss)
    if not isinstance(model, nn.Module):
        factory = as_factory(model)
        check_model_and_loss(factory, loss_fn, x, y)
        model = make_model(factory, seed=seed)
    dev = resolve(device)
    torch.manual_seed(seed)
    model.to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = x.to(dev), y.to(dev)
    hist = History(device=str(dev), model=model)
    steps_per_epoch = -(-len(y) // batch_size)
    read_every = max(1, -(-steps_per_epoch // LOSS_READS_PER_EPOCH))
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
             if schedule == "cosine" else None)
    bar = progress_bar(epochs * steps_per_epoch, f"train on {dev}", progress)
    waits = _sync_points(epochs * steps_per_epoch)
    lrs, seconds, sizes = hist.lr, hist.step_seconds, hist.step_samples   # appended to each step
    batching = compute = 0.0
    for epoch in range(epochs):
        t, pending, first, shown = time.perf_counter(), [], len(seconds), len(seconds)
        shown_t = t
        for xb, yb in batches(x, y, batch_size, shuffle=True, seed=seed, epoch=epoch):
            t_batch = time.perf_counter()
            pending.append(train_step(model, opt, loss_fn, xb, yb))   # the loss, left on the device
            lrs.append(opt.param_groups[0]["lr"])
            if sched is not None:
                sched.step()
            if timing or len(seconds) + 1 in waits:
                synchronize(dev)
            if len(pending) == read_every:
                _read_losses(pending, hist, bar)   # waits for the device: counted as compute
            t_done = time.perf_counter()
            batching += t_batch - t
            compute += t_done - t_batch
            seconds.append(t_done - t)
            sizes.append(yb.shape[0])
            t = t_done
            if t_done - shown_t >= BAR_EVERY_S:   # the bar, a few times a second: not each step
                bar.update(len(seconds) - shown)
                shown, shown_t = len(seconds), t_done
        if pending:
            _read_losses(pending, hist, bar)
        tail = time.perf_counter() - t   # what the device still had queued: the epoch's last step's
        compute += tail
        seconds[-1] += tail
        bar.update(len(seconds) - shown)
        hist.epoch_steps.append(len(seconds) - first)
        hist.seconds_batching, hist.seconds_compute = batching, compute
        hist.samples = sum(sizes)
        hist.samples_per_s = samples_per_s(hist.samples, batching + compute)
        if test_data is not None:
            t0 = time.perf_counter()
            hist.test_accuracy.append(evaluate(model, test_data, dev))
            hist.seconds_eval += time.perf_counter() - t0
            bar.set_postfix(loss=f"{hist.loss[-1]:.3f}", acc=f"{hist.test_accuracy[-1]:.4f}")
    bar.close()
    return hist


# How often an epoch reads its losses back from the device: each read waits for the device.
LOSS_READS_PER_EPOCH = 2
# How often the loop hands its steps to the progress bar (which redraws every ``PROGRESS_EVERY_S`` at most):
# a bar's update costs microseconds, a tiny model's step not many more.
BAR_EVERY_S = 0.1


def _read_losses(pending: list, hist: History, bar) -> None:
    """Move the losses kept on the device into ``hist.loss`` (one read for all), show the last."""
    with torch.no_grad():   # the losses keep their (freed) graphs: no detach per step, none here either
        hist.loss += torch.stack(pending).float().tolist()
    pending.clear()
    bar.set_postfix(loss=f"{hist.loss[-1]:.3f}", refresh=False)
