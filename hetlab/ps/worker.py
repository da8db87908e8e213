"""One parameter-server worker (notebook 05): a Ray actor that keeps the whole training set on its
device, trains on the stream positions each message names and answers ONE flat CPU buffer: the
gradient (sync, async) or the change after H local steps (local SGD).
"""
from __future__ import annotations

import os
import time

import numpy as np
import ray
import torch
from torch import nn

from hetlab.core.data import as_tensors
from hetlab.core.stream import stream_indices
from hetlab.core.devices import resolve
from hetlab.core.flat import flat_grad, load_flat
from hetlab.core.machine import kernel_id, origin_label
from hetlab.core.models import make_model
from hetlab.ps.specs import WorkerSpec
from hetlab.core.simulate import SlowDevice
from hetlab.core.train import TRAINING_OPTIMIZER, make_optimizer, shape_key, timed_spans, train_step, warm_up

class Worker:
    """A Ray actor computing gradients (or local-SGD deltas) on its own device. An answer is
    ``(buffer, (loss, compute_s, simulated_s, samples))``."""

    def __init__(self, spec: WorkerSpec, train, model="small", seed=0, lr=1e-3, transfer="fp32", loss=None):
        self.name, self.seed, self.lr = spec.name, seed, lr
        self.model_name = model  # a built-in name or a factory
        self.loss = loss or nn.functional.cross_entropy
        self.slow = SlowDevice(spec.slowdown)
        self.device = resolve(spec.device)       # resolved here, on the worker's own node
        self.wire = torch.float16 if transfer == "fp16" else torch.float32
        self.model = make_model(model, seed=seed).to(self.device).train()
        self.params = list(self.model.parameters())
        x, y = as_tensors(train)  # a hetlab Dataset (normalised here) or (x, y)
        self.x, self.y = x.to(self.device), y.to(self.device)
        self.local_opt: torch.optim.Optimizer | None = None  # local SGD's inner Adam, kept between rounds

    def info(self) -> dict:
        """Where this worker really runs: its node, its machine's kernel id (workers sharing cores), its
        device and its host's origin label, if any."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "device": str(self.device),
                "machine": kernel_id(), "origin": origin_label()}

    def set_threads(self, sharing: int) -> int:
        """Use this machine's cores divided by the number of workers sharing it (its own process's
        choice, made once at the start: two workers each on all the cores would fight over them)."""
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, int(sharing))))
        return torch.get_num_threads()

    def set_slowdown(self, slowdown: float) -> None:
        """From now on, simulate a device ``slowdown``× slower than this one (notebook 06)."""
        self.slow.slowdown = float(slowdown)  # its timings of real work stay valid

    def local_state(self) -> dict:
        """The local optimizer's state (local SGD), for checkpoints; {} in the other modes."""
        return {} if self.local_opt is None else {"local_opt": _to_cpu(self.local_opt.state_dict())}

    def load_local_state(self, state: dict) -> None:
        if "local_opt" in state:
            self._ensure_local_opt()
            self.local_opt.load_state_dict(state["local_opt"])

    def _indices(self, spans) -> torch.Tensor:
        """The samples at these positions of the shuffled stream, on this worker's device."""
        return stream_indices(len(self.y), self.seed, spans).to(self.device)

    def _batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``idx``: ``index_select`` gathers rows ~4× faster than ``x[idx]``."""
        return self.x.index_select(0, idx), self.y.index_select(0, idx)

    def _loss_backward(self, xb, yb) -> torch.Tensor:
        """Forward + backward of one batch: the gradients in the parameters' ``.grad``."""
        for p in self.params:
            p.grad = None
        loss = self.loss(self.model(xb), yb)
        loss.backward()
        return loss.detach()

    def _random_batch(self, batch_size: int, g: torch.Generator):
        idx = torch.randint(0, len(self.y), (batch_size,), generator=g).to(self.device)
        return self.x[idx], self.y[idx]

    def warm(self, batch_size: int, local_sgd: bool = False) -> bool:
        """One untimed forward + backward at ``batch_size`` if this worker has not run that shape yet, so
        no timed step pays for compiling it (MPS). With ``local_sgd`` it builds an Adam too (the first
        imports torch parts for a second or more). Weights and random generators stay as they were."""
        def step():
            with _fork_rng(self.device):
                self._loss_backward(*self._random_batch(batch_size, torch.Generator().manual_seed(batch_size)))
            for p in self.params:
                p.grad = None

        if local_sgd:
            self._ensure_local_opt()
        return warm_up(shape_key(self.model, self.device, batch_size, "train"), step, self.device)

    def gradient(self, spans: list, weights: np.ndarray) -> tuple:
        """The mean-loss gradient of the samples at ``spans`` (positions of the shuffled stream) at
        ``weights`` (the flat buffer): the gradient on the CPU, in the wire's dtype, and the reply."""
        t0 = time.perf_counter()
        load_flat(self.params, torch.from_numpy(np.array(weights)))   # Ray's arrays are read-only: a copy
        idx = self._indices(spans)
        loss = self._loss_backward(*self._batch(idx))
        grad = flat_grad(self.params, self.wire)
        loss = float(loss)                                   # waits for the device too
        compute_s = time.perf_counter() - t0
        simulated_s = self.slow.after(("gradient", len(idx)), compute_s)
        return grad.numpy(), (loss, compute_s, simulated_s, len(idx))   # Ray sends a numpy array's raw bytes

    def _ensure_local_opt(self) -> None:
        if self.local_opt is None:
            self.local_opt = torch.optim.Adam(self.params, lr=self.lr)

    def local_round(self, spans: list, steps: int, weights: np.ndarray) -> tuple:
        """Local SGD: ``steps`` Adam steps from ``weights``, one per consecutive equal part of the
        positions at ``spans``; answers start − end as ``gradient`` answers its gradient."""
        t0 = time.perf_counter()
        self._ensure_local_opt()
        start = torch.from_numpy(np.array(weights)).to(self.device, torch.float32)
        load_flat(self.params, start)
        idx = self._indices(spans)
        losses = []
        for batch in idx.view(steps, -1):
            losses.append(self._loss_backward(*self._batch(batch)))
            self.local_opt.step()
        delta = (start - torch.nn.utils.parameters_to_vector(self.params).detach()).to("cpu", self.wire)
        loss = float(torch.stack(losses).mean())
        compute_s = time.perf_counter() - t0
        simulated_s = self.slow.after(("local_round", len(idx), steps), compute_s)
        return delta.numpy(), (loss, compute_s, simulated_s, len(idx))

    def standalone(self, weights: torch.Tensor, batch_size: int, steps: int) -> float:
        """Samples/s of this device training alone, simulated slowdown included: full optimizer steps on
        a scratch copy of the model and random samples (``train.timed_spans``)."""
        model = make_model(self.model_name, seed=None).to(self.device).train()
        load_flat(model, weights)
        opt = make_optimizer(TRAINING_OPTIMIZER, model.parameters(), lr=self.lr)
        g = torch.Generator().manual_seed(12345)

        def step():
            train_step(model, opt, self.loss, *self._random_batch(batch_size, g))

        key = shape_key(model, self.device, batch_size, "alone")
        warm_up(key, step, self.device)
        spans = [1] * steps   # a simulated device waits after each step
        return batch_size * steps / sum(timed_spans(step, self.device, spans, self.slow, key))


def _fork_rng(device: torch.device):
    """Restore on exit the random generators a step may draw from (dropout): CPU and ``device``'s."""
    if device.type == "cpu":
        return torch.random.fork_rng(devices=[])
    return torch.random.fork_rng(devices=[device.index or 0], device_type=device.type)


def _to_cpu(obj):
    """Every tensor in a nested dict/list copied to the CPU (for checkpoints)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu").clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
