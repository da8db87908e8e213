"""The parameter server: one flat fp32 weight buffer and the optimizer that updates it (notebook 05).

It combines the workers' gradients weighted by the samples each stands for, Σ (b_i / Σb) · g_i (not
the mean, which over-weights a small batch, nor the sum; arithmetic in ``hetlab.ps.rules``), in the
driver's process: an actor would add a second trip per step (``benchmarks/server_trip.py``).
"""
from __future__ import annotations

import copy
import queue
import threading
import time

import torch
from torch import nn

from hetlab.core.flat import flat_weights
from hetlab.core.models import make_model
from hetlab.errors import HetlabError
from hetlab.ps.messages import Update
from hetlab.core.train_step import make_optimizer


class Server:
    """The weights and the optimizer (Adam, or plain SGD with ``optimizer="sgd"``; outer SGD
    in local-SGD mode), in the driver's process; ``threads``: its updates' torch threads."""

    def __init__(self, model, seed: int, lr: float, mode: str,
                 outer_lr: float = 1.0, outer_momentum: float = 0.0, optimizer: str = "adam",
                 threads: int = 1):
        self.w = nn.Parameter(flat_weights(make_model(model, seed=seed)))
        if mode == "local_sgd":  # DiLoCo's outer step: SGD (Nesterov when momentum > 0)
            self.opt = torch.optim.SGD([self.w], lr=outer_lr, momentum=outer_momentum,
                                       nesterov=outer_momentum > 0)
        else:
            self.opt = make_optimizer(optimizer, [self.w], lr=lr)
        self.version = 0
        self._thread = OwnThread(threads)

    def weights(self) -> torch.Tensor:
        """A copy of the weights: one flat fp32 CPU tensor."""
        return self.w.detach().clone()

    def apply(self, coefficients: list[float], grads: list[torch.Tensor]) -> Update:
        """Σ c_i · g_i as the gradient, one optimizer step (on the server's own thread); the
        ``Update`` holds a copy of the new weights. ``grads``: flat buffers in any float dtype."""
        if self._thread is None:
            raise HetlabError("this server is closed (its training was shut down): start a new training.")
        return self._thread.run(self._apply, coefficients, grads)

    def close(self) -> None:
        """Stop the server's thread (``ParameterServerTraining.shutdown`` calls it); the weights stay
        readable. Without it every training run in a notebook's kernel leaves one idle thread behind."""
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    def _apply(self, coefficients: list[float], grads: list[torch.Tensor]) -> Update:
        t0 = time.perf_counter()
        combined = torch.zeros_like(self.w)
        for c, g in zip(coefficients, grads):
            combined.add_(g.float(), alpha=c)
        self.w.grad = combined
        self.opt.step()
        self.w.grad = None
        self.version += 1
        return Update(self.w.detach().clone(), self.version, time.perf_counter() - t0)

    def state(self) -> dict:
        """A copy of the weights, the optimizer's state and the version, for a checkpoint."""
        return {"weights": self.w.detach().clone(), "optimizer": copy.deepcopy(self.opt.state_dict()),
                "version": self.version}

    def load_state(self, state: dict) -> int:
        with torch.no_grad():
            self.w.copy_(state["weights"])
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        return self.version


# Default 1 thread: the driver's machine also runs a worker, and for a small model a second torch
# thread here slows that worker more than it speeds the update (Adam's square root spreads over the
# cores from a few hundred values on: on the driver's 2 threads of a loaded 2-core box, 1,960 values
# took 1 ms on average, 14 µs on one). OpenMP counts threads per thread: the driver's own stay.
class OwnThread:
    """One thread whose torch ops use ``threads`` threads, and ``run(fn, *args)`` on it, waited for.
    ``torch.set_num_threads`` there sets that thread's count, and also torch's default for threads
    started later: that default is put back from a short-lived thread, so nothing else in the
    process changes. The hand-over is two queues: a ThreadPoolExecutor's future, lock and
    condition took 3× as long a call (33 against 10 µs median here)."""

    def __init__(self, threads: int):
        default = torch.get_num_threads()
        self._jobs, self._done, self._lock = queue.SimpleQueue(), queue.SimpleQueue(), threading.Lock()
        self._thread = threading.Thread(target=self._serve, args=(threads,), name="hetlab-server", daemon=True)
        self._thread.start()
        self.run(torch.get_num_threads)   # its own count is set once this returns
        restore = threading.Thread(target=torch.set_num_threads, args=(default,))
        restore.start()
        restore.join()

    def _serve(self, threads: int) -> None:
        torch.get_num_threads()           # torch sets a thread's count up on its first use ...
        torch.set_num_threads(threads)    # ... and from then on this one is the thread's own
        while (job := self._jobs.get()) is not None:
            fn, args = job
            try:
                self._done.put((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                self._done.put((False, e))

    def run(self, fn, *args):
        """``fn(*args)`` on this thread: its result, or its exception raised here."""
        with self._lock:
            self._jobs.put((fn, args))
            ok, value = self._done.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Stop the thread, once what it runs has ended."""
        self._jobs.put(None)
        self._thread.join()
