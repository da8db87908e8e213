"""One trial of the search (notebook 09): one configuration trained on the device Ray gave it on its
machine (CUDA or MPS, else the CPU), reporting to Ray Tune after every epoch.
"""
from __future__ import annotations

import functools
import logging
import io
import time

import torch

from hetlab.cluster.roles import ROLE_LABEL, SIMULATED_LABEL
from hetlab.core.data import batches, load_mnist
from hetlab.core.devices import best, synchronize
from hetlab.core.machine import kernel_id
from hetlab.core.models import make_model, small_cnn
from hetlab.core.simulate import SlowDevice, labelled
from hetlab.core.train import train_step
from hetlab.core.train import evaluate

OPTIMIZERS = {"adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
              "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)}


@functools.lru_cache(maxsize=2)
def split_data(train_samples: int, val_samples: int, seed: int = 0):
    """``(x, y)`` to train on and ``(x, y)`` to score on: disjoint parts of MNIST's *training* set
    (a search must not choose by the test set), kept per process for the next trial there."""
    data = load_mnist("train").subset(train_samples + val_samples, seed=seed)
    x, y = data.normalized(), data.labels
    return (x[:train_samples], y[:train_samples]), (x[train_samples:], y[train_samples:])


def where_am_i(slowdowns: dict) -> tuple[str, str, float]:
    """This trial's (role, learner-facing machine label, slowdown), from its node's labels."""
    import ray
    labels = ray.get_runtime_context().get_node_labels()
    role = labels.get(ROLE_LABEL) or "unlabelled node"
    slowdown = float(slowdowns.get(role, 1.0))
    name = f"{role} (simulated)" if labels.get(SIMULATED_LABEL) == "true" and slowdown <= 1 else role
    return role, labelled(name, slowdown), slowdown


def build(cfg: dict, model, dev: torch.device):
    """The network and optimizer of one configuration, on ``dev``, with its seed's weights; the
    generators its training draws from (dropout) start from the same seed."""
    net = make_model(functools.partial(model, width=cfg["width"]), seed=cfg["seed"]).to(dev)
    torch.manual_seed(cfg["seed"])
    return net, OPTIMIZERS[cfg["optimizer"]](net.parameters(), cfg["lr"])


def epochs_of(net, opt, x, y, cfg: dict, dev, first: int, last: int, slow: SlowDevice):
    """Train epochs ``first``..``last - 1`` with hetlab's step; after each, yield ``(epoch, samples,
    busy_s, loss)`` of it (busy: compute and any simulated sleep; loss: its mean training loss).
    The device is synchronised once per epoch, so a GPU keeps its queue full."""
    loss_fn = torch.nn.functional.cross_entropy
    for epoch in range(first, last):
        samples, started, total = 0, time.perf_counter(), torch.zeros((), device=dev)
        for xb, yb in batches(x, y, cfg["batch_size"], shuffle=True, seed=cfg["seed"], epoch=epoch):
            t0 = time.perf_counter()
            total += train_step(net, opt, loss_fn, xb, yb).detach() * len(yb)
            if slow.slowdown > 1:
                slow.after(len(yb), time.perf_counter() - t0)
            samples += len(yb)
        synchronize(dev)
        yield epoch, samples, time.perf_counter() - started, total.item() / samples


def run_trial(config: dict, *, train_samples: int, val_samples: int, epochs: int, slowdowns: dict, keeper) -> None:
    """Train ``config["config"]`` for up to ``epochs`` epochs, reporting to Tune and saving its state in
    ``keeper`` after each; retried by Tune after a failure, it goes on from there."""
    import ray
    from ray import tune
    for noisy in ("ray.train", "ray.tune"):  # no "Checkpoint successfully created" per epoch
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cfg = config["config"]
    role, machine, slowdown = where_am_i(slowdowns)
    dev = torch.device(best() if ray.get_gpu_ids() else "cpu")   # never a GPU Ray did not give
    (x, y), val = split_data(train_samples, val_samples)
    x, y = x.to(dev), y.to(dev)  # copies on a GPU; on the CPU the cached tensors, which no step changes
    net, opt = build(cfg, small_cnn, dev)
    start, samples, busy_s = 0, 0, 0.0
    slow = SlowDevice(slowdown)
    saved = ray.get(keeper.get.remote(cfg["trial"]))  # a retried trial's last state
    if saved is not None:
        start, samples, busy_s = resume(saved, net, opt, dev)
    computer = kernel_id()
    for epoch, n, s, loss in epochs_of(net, opt, x, y, cfg, dev, start, epochs, slow):
        samples, busy_s = samples + n, busy_s + s
        ray.get(keeper.put.remote(cfg["trial"], save(net, opt, epoch + 1, samples, busy_s)))  # before the report
        t0 = time.perf_counter()
        accuracy = evaluate(net, val, dev)
        slow.after("evaluation", time.perf_counter() - t0)  # a slower device evaluates slower too
        tune.report({"epoch": epoch + 1, "accuracy": accuracy, "loss": loss, "samples": samples, "busy_s": busy_s,
                     "machine": machine, "role": role, "device": dev.type, "computer": computer})


def save(net, opt, epoch: int, samples: int, busy_s: float) -> bytes:
    """What a trial needs to go on exactly where it stopped, as bytes (the CPU's random generator for
    dropout: a GPU's cannot move between a Mac and a CUDA card)."""
    buffer = io.BytesIO()
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch, "samples": samples,
                "busy_s": busy_s, "rng": torch.get_rng_state()}, buffer)
    return buffer.getvalue()


def resume(saved: bytes, net, opt, dev) -> tuple[int, int, float]:
    """Load ``save``'s bytes into ``net`` and ``opt`` on ``dev``; the (next epoch, samples, busy_s) to go on from."""
    state = torch.load(io.BytesIO(saved), map_location=dev, weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])  # dropout's masks go on as they would have
    return state["epoch"], state["samples"], state["busy_s"]


class CheckpointKeeper:
    """Trial number → the bytes of its last saved state (``save``), in an actor beside the driver:
    a retried trial reads it back with no folder both machines share (Tune's checkpoints go into
    its storage from the trial's machine, which the driver's may not see)."""

    def __init__(self):
        self.saved: dict[int, bytes] = {}

    def put(self, trial: int, state: bytes) -> None:
        self.saved[trial] = state

    def get(self, trial: int) -> bytes | None:
        return self.saved.get(trial)


def start_keeper():
    """A ``CheckpointKeeper`` actor on this process's node (no CPU reserved: it only stores)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(CheckpointKeeper).options(scheduling_strategy=here).remote()
