"""Heterogeneous parameter-server training on Ray: sync, async, local SGD (notebooks 05, 06, 08).

``ParameterServerTraining`` holds the ``Server``, the live workers (their specs, shares and actors),
the one cursor into the shuffled data (``Stream``), the records and events; ``run`` calls
``hetlab.ps.loop``. Every change of the split goes through ``resplit``; ``save_checkpoint`` and
``resume`` continue a run exactly.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import ray
import torch

from hetlab.cluster import roles
from hetlab.cluster.connecting import connect
from hetlab.core.checkpoint import CHECKPOINT_GLOB, FORMAT, checkpoint_path, load_checkpoint, param_signature, save_checkpoint
from hetlab.core.data import Dataset, as_tensors, n_samples
from hetlab.core.stream import Stream
from hetlab.errors import HetlabError, one_line
from hetlab.core.flat import flat_weights, load_flat
from hetlab.core.simulate import labelled
from hetlab.core.machine import patience
from hetlab.core.models import as_factory, as_loss, check_model_and_loss, make_model, model_label
from hetlab import progress_bar
from hetlab.ps.loop import async_updates, collect, drop_lost, sync_steps
from hetlab.ps.server import Server
from hetlab.ps.specs import (WorkerSpec, actor_options, check_batch_sizes, check_count, check_local_steps,
                             check_options, check_positive, check_spec)
from hetlab.ps.records import Event, StepRecord, per_worker_samples_per_s
from hetlab.ps.worker import Worker
from hetlab.core.train import evaluate, held_out
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN

__all__ = ["WorkerSpec", "StepRecord", "ParameterServerTraining"]
KEEP_CHECKPOINTS = 3  # automatic checkpoints kept in their folder (the newest ones)


class ParameterServerTraining:
    """Train one model on unlike workers through a parameter server (notebooks 05, 06, 08).

    ``mode``: "sync" (Σ (b_i/B)·g_i), "async" (each gradient as it comes, at most ``max_staleness``
    late) or "local_sgd" (``local_steps``: H inner Adam steps, one for all or one per worker). ``lr`` and
    ``optimizer``: the server's; ``transfer``: the answers' dtype; ``seed``: weights and data order.
    ``checkpoint_every``: a checkpoint in ``checkpoint_dir`` every that many steps. A context manager."""

    def __init__(self, workers: list[WorkerSpec], train_data, model="small", *, batch_sizes: list[int] | None = None,
                 local_steps: int | list[int] = 8, loss=None, checkpoint_dir=None, checkpoint_every: int = 0,
                 progress: bool = True, worker_timeout_s: float = 120.0, mode: str = "sync", lr: float = 1e-3,
                 optimizer: str = "adam", max_staleness: int = 2, transfer: str = "fp32", seed: int = 0):
        if isinstance(workers, WorkerSpec) or not isinstance(workers, (list, tuple)) or not workers:
            raise HetlabError("workers must be a non-empty list of WorkerSpec, e.g. [WorkerSpec('desktop')].")
        for spec in workers:
            check_spec(spec)
        if len({s.name for s in workers}) != len(workers):
            raise HetlabError(f"worker names {[s.name for s in workers]} must be distinct.")
        self.options = check_options(dict(mode=mode, lr=lr, optimizer=optimizer, max_staleness=max_staleness,
                                          transfer=transfer, seed=seed))   # saved whole in every checkpoint
        self.mode = mode
        # what goes into Ray's object store: a hetlab Dataset as it is (uint8, a quarter of the bytes)
        payload = train_data if isinstance(train_data, Dataset) else as_tensors(train_data)
        if n_samples(payload) < len(workers):
            raise HetlabError(f"{n_samples(payload)} training samples cannot be split over {len(workers)} workers.")
        factory, loss = as_factory(model), as_loss(loss)  # a bad name or factory → HetlabError now
        probe = (Dataset(payload.images[:2], payload.labels[:2]) if isinstance(payload, Dataset)
                 else (payload[0][:2], payload[1][:2]))
        check_model_and_loss(factory, loss, *as_tensors(probe))  # shapes that don't fit → now
        sizes = check_batch_sizes(batch_sizes or [64] * len(workers), len(workers))
        hs = check_local_steps(local_steps, len(workers))  # local SGD's H, one per worker
        check_positive("worker_timeout_s", worker_timeout_s)
        check_count("checkpoint_every", checkpoint_every, 0)
        self.factory, self.loss = factory, loss
        self.model_name = model_label(model)  # a built-in name, or the factory's qualified name
        self.checkpoint_dir, self.checkpoint_every, self.progress = checkpoint_dir, checkpoint_every, progress
        self.n_params = flat_weights(make_model(factory, seed=None)).numel()
        self.workers = list(workers)           # the live workers, in order: a lost one is dropped
        self.batch_sizes, self.local_steps = sizes, hs   # each live worker's b_i and local SGD's H_i
        self.actors, self.info, self.warmed = {}, {}, {s.name: set() for s in workers}  # by name (Worker.info)
        self.timeout_s = worker_timeout_s
        self.weights_bytes = BYTES_PER_VALUE[WEIGHTS_DOWN] * self.n_params           # one message down
        self.gradient_bytes = BYTES_PER_VALUE[transfer] * self.n_params  # one answer up
        self.weights = None   # the server's weights as the next calls carry them (a numpy array)
        self.step = self.first_step = self.samples_seen = self.bytes_to_workers = self.bytes_to_server = self.warmups = 0
        self.records: list[StepRecord] = []
        self.events: list[Event] = []
        self.data_len = n_samples(payload)
        self.stream = Stream()
        self.server = None
        if not ray.is_initialized():
            connect()   # embedded local Ray, or HETLAB_ADDRESS / RAY_ADDRESS
        where = [actor_options(s) for s in workers]
        roles.check_free([(s.name, s.role) for s, p in zip(workers, where) if p.get("num_gpus")])
        try:
            self._start(payload, where)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, train_data, where: list[dict]) -> None:
        data, o = ray.put(train_data), self.options  # the data once; each worker's node fetches it once
        for spec, options in zip(self.workers, where):
            opts = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0, **options}
            self.actors[spec.name] = ray.remote(Worker).options(**opts).remote(spec, data, self.factory, o["seed"],
                                                                                o["lr"], o["transfer"], self.loss)
        self.server = Server(self.factory, o["seed"], o["lr"], o["mode"], o["optimizer"])
        refs = [actor.info.remote() for actor in self.actors.values()]
        window = patience(self.timeout_s)   # a start: a new process imports torch; a busy machine is slower
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=window)
        if len(ready) < len(refs):
            late = [name for name, r in zip(self.names, refs) if r not in ready]
            raise HetlabError(f"workers {late} did not start within {window:.0f} s: "
                              f"check hetlab.cluster.node_table() shows their machines.")
        try:
            self.info = dict(zip(self.names, ray.get(refs)))
        except ray.exceptions.RayError as e:
            raise HetlabError(f"a worker failed to start: {one_line(e)}") from None
        machines = [info["machine"] for info in self.info.values()]  # each worker: its machine's share of cores
        self.answers({n: self.actors[n].set_threads.remote(machines.count(self.info[n]["machine"])) for n in self.names},
                     "starting", then="check hetlab.cluster.node_table() shows its machine and start again")
        self.weights = self.server.weights().numpy()
        if self.progress:
            for label in self.labels:
                print(f"worker {label}")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.workers]

    @property
    def labels(self) -> list[str]:
        """Learner-facing worker labels: name · device (simulated …× slower)."""
        return [_label(s, self.info[s.name]) for s in self.workers]

    def index(self, name: str) -> int:
        """Where worker ``name`` is in ``workers``, ``batch_sizes`` and ``local_steps``."""
        if name not in self.names:
            raise HetlabError(f"no worker named {name!r} (workers: {self.names}).")
        return self.names.index(name)

    @property
    def bytes_sent(self) -> int:
        """Bytes moved both ways: weights to workers (fp32) + gradients/deltas to the server."""
        return self.bytes_to_workers + self.bytes_to_server

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_sent / self.samples_seen if self.samples_seen else 0.0

    def resplit(self, sizes: list[int], why: str = "set", **seen) -> Event | None:
        """Give each worker its batch size; a change leaves a "resplit" ``Event`` saying ``why`` (``seen``:
        what ``FollowSplit`` saw), returned, or None when nothing changed."""
        sizes, before = check_batch_sizes(sizes, len(self.workers)), self.batch_sizes
        if sizes == before:
            return None
        self.batch_sizes = sizes
        self.events.append(Event(self.step, "resplit", why, tuple(before), tuple(sizes), **seen))
        return self.events[-1]

    def set_local_steps(self, local_steps) -> None:
        """Local SGD's H from the next round on: one for all, or one per worker (notebook 08)."""
        self.local_steps = check_local_steps(local_steps, len(self.workers))

    def set_slowdown(self, name: str, slowdown: float) -> None:
        """Make worker ``name`` a *simulated* ``slowdown``× slower device from the next step on (notebook
        06: a laptop that throttles as it heats). 1 = its own speed."""
        i = self.index(name)
        spec = dataclasses.replace(self.workers[i], slowdown=slowdown)
        check_spec(spec)
        self.answers({name: self.actors[name].set_slowdown.remote(spec.slowdown)}, "setting its slowdown")
        self.workers[i] = spec
        self.events.append(Event(self.step, "slowdown", worker=_label(spec, self.info[name]), slowdown=spec.slowdown))

    def warm_up(self) -> None:
        """One untimed step for each worker at a batch size new to it (``Worker.warm``: MPS compiles per
        shape). A worker gone here is left to the step, which drops it."""
        new = {n: b for n, b in zip(self.names, self.batch_sizes) if b not in self.warmed[n]}
        if not new:
            return
        ran, _ = collect(self, {n: self.actors[n].warm.remote(b, self.mode == "local_sgd") for n, b in new.items()})
        for n, b in new.items():
            if n in ran:
                self.warmed[n].add(b)
                self.warmups += int(ran[n])

    def answers(self, refs: dict, what: str, then: str = "run a step (it drops a lost worker) and try again") -> dict:
        """{name: answer} of calls to the workers in ``refs`` ({name: a call's ref}); a worker that went
        away is one line, not Ray's traceback."""
        got, lost = collect(self, refs)
        if lost:
            who = "; ".join(f"{self.workers[self.index(name)].label}: {why}" for name, why in lost.items())
            raise HetlabError(f"a worker went away while {what} ({who}): {then}.")
        return got

    def run(self, steps: int, batch_sizes: list[int] | None = None, hooks: list = ()) -> list[StepRecord]:
        """Train ``steps`` server updates (local SGD: rounds); returns their records. ``hooks``: callables,
        each called as ``hook(training)`` after every step (e.g. ``FollowSplit(N)``, notebook 06)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise HetlabError(f"steps must be a whole number ≥ 0, got {steps!r}.")
        if self.is_shut_down:
            raise HetlabError("this training is shut down: start a new ParameterServerTraining.")
        if batch_sizes is not None:
            self.resplit(batch_sizes, "set")
        bar = progress_bar(steps, f"{self.mode}, {len(self.workers)} workers", self.progress)

        def show(run):
            bar.update(1)
            bar.set_postfix(loss=f"{run.records[-1].loss:.3f}", refresh=False)

        try:
            return self._steps(steps, [*hooks, show], checkpoints=True)
        finally:
            bar.close()

    def _steps(self, steps: int, callbacks: list, checkpoints: bool) -> list[StepRecord]:
        """``steps`` steps of this run's mode, the callbacks after each: their records."""
        start, self.first_step = len(self.records), self.step
        if steps:
            self.warm_up()
        if self.mode == "async":
            async_updates(self, steps, callbacks, checkpoints)
        else:
            sync_steps(self, steps, callbacks, checkpoints)
        return self.records[start:]

    def checkpoint_due(self) -> bool:
        """An automatic checkpoint is due after this step."""
        return bool(self.checkpoint_dir and self.checkpoint_every and self.step % self.checkpoint_every == 0)

    def auto_checkpoint(self) -> None:
        """A checkpoint in ``checkpoint_dir`` (``step-NNNNNN.pt``), keeping the newest ``KEEP_CHECKPOINTS``."""
        self.save_checkpoint(checkpoint_path(self.checkpoint_dir, self.step))
        for old in sorted(Path(self.checkpoint_dir).glob(CHECKPOINT_GLOB))[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)

    def measure(self, batch_sizes: list[int], steps: int = 3) -> list[float]:
        """Per-worker samples/s (compute + simulated + comm) over ``steps`` real steps at these sizes
        (``auto_tune``'s measurement); no hooks, and the batch sizes are put back afterwards."""
        old = list(self.batch_sizes)
        try:
            self.resplit(batch_sizes, "measure")
            records = self._steps(steps, [], checkpoints=False)
        finally:
            if len(old) == len(self.workers):
                self.resplit(old, "measure")
        return per_worker_samples_per_s(records, self.names)

    def standalone_samples_per_s(self, batch_size, steps: int = 5) -> list[float]:
        """Each worker training on its own, one after another (no waiting, no communication):
        samples/s of full steps on its device, simulated slowdown included."""
        sizes = check_batch_sizes([batch_size] * len(self.workers) if isinstance(batch_size, int)
                                  else batch_size, len(self.workers))
        weights, got = self.server.weights(), {}
        for name, b in zip(self.names, sizes):
            got |= self.answers({name: self.actors[name].standalone.remote(weights, b, steps)}, "timing it alone")
        return [got[name] for name in self.names]

    def run_checked(self, steps: int, test_data, every: int, test_samples: int = 1000,
                    batch_sizes: list[int] | None = None) -> tuple[list[StepRecord], dict]:
        """``run`` with the weights evaluated, untimed, on ``test_samples`` test samples every ``every`` steps
        (notebooks 05, 08): the records and ``{"checks": [(training seconds, accuracy)], ...}``."""
        check_count("every", every, 1)
        held = held_out(test_data, test_samples)
        records, checks = [], []
        for done in range(0, steps, every):
            records += self.run(min(every, steps - done), batch_sizes)
            seconds = dict((r.step, r.step_s) for r in records)          # a sync step's records share one
            checks.append((sum(seconds.values()), self.evaluate(held)))
        unit = "rounds" if self.mode == "local_sgd" else "steps"   # local SGD: a record per round of H steps
        return records, {"checks": checks, "every": every, "test_samples": n_samples(held), "unit": unit}

    def model(self) -> torch.nn.Module:
        """The current weights in a fresh model, on the CPU."""
        model = make_model(self.factory, seed=None)
        load_flat(model, self.server.weights())
        return model

    def evaluate(self, test_data) -> float:
        """Test accuracy of the current weights (on the driver's CPU)."""
        return evaluate(self.model(), test_data, "cpu")

    def save_checkpoint(self, path=None) -> Path:
        """What the run needs to go on → ``path`` on the driver's disk (default: in ``checkpoint_dir``),
        taken when nothing is in flight. A worker gone since its last step is dropped first."""
        if path is None:
            if not self.checkpoint_dir:
                raise HetlabError("give save_checkpoint(path) or checkpoint_dir=... when starting.")
            path = checkpoint_path(self.checkpoint_dir, self.step)
        local, lost = collect(self, {n: actor.local_state.remote() for n, actor in self.actors.items()})
        drop_lost(self, lost, {})   # nothing is in flight: no positions to give back
        state = {"format": FORMAT, "model": self.model_name, "signature": param_signature(self.factory),
                 "options": self.options, "step": self.step, "samples_seen": self.samples_seen,
                 "server": self.server.state(), "workers": [{"name": n, **local[n]} for n in self.names],
                 "batch_sizes": self.batch_sizes, "local_steps": self.local_steps, "stream": self.stream.state(),
                 "data_len": self.data_len, "bytes_to_workers": self.bytes_to_workers,
                 "bytes_to_server": self.bytes_to_server}
        path = save_checkpoint(state, path)
        self.events.append(Event(self.step, "checkpoint", path=str(path)))
        return path

    @classmethod
    def resume(cls, path, workers: list[WorkerSpec], train_data, **overrides) -> "ParameterServerTraining":
        """A new training continuing bit for bit where the checkpoint at ``path`` stopped, with one
        WorkerSpec per saved worker; ``overrides``: e.g. ``progress``, or ``model=`` your factory again."""
        model = overrides.pop("model", None)
        ckpt = load_checkpoint(path, model=model)
        saved = ckpt["workers"]
        if not isinstance(workers, (list, tuple)) or len(workers) != len(saved):
            raise HetlabError(f"{path} was saved with {len(saved)} workers ({[w['name'] for w in saved]}): "
                              f"give one WorkerSpec per saved worker.")
        if n_samples(train_data) != ckpt["data_len"]:
            raise HetlabError(f"{path} was trained on {ckpt['data_len']} samples, not {n_samples(train_data)}: "
                              f"resume with the same training data.")
        kwargs = {**ckpt["options"], "batch_sizes": ckpt["batch_sizes"], "local_steps": ckpt["local_steps"],
                  **overrides}
        mode = ckpt["options"]["mode"]
        if (kwargs["mode"] == "local_sgd") != (mode == "local_sgd"):
            raise HetlabError(f"{path} is a {mode} checkpoint: local_sgd uses another optimizer, "
                              f"resume it in mode {mode!r}.")
        run = cls(workers, train_data, model=ckpt["model"] if model is None else model, **kwargs)
        try:
            run.stream, run.step = resume_state(ckpt, run.server)
            run.answers({n: run.actors[n].load_local_state.remote(w) for n, w in zip(run.names, saved)},
                        "loading the checkpoint", then="check hetlab.cluster.node_table() and resume again")
            run.samples_seen = ckpt["samples_seen"]
            run.bytes_to_workers, run.bytes_to_server = ckpt["bytes_to_workers"], ckpt["bytes_to_server"]
            run.weights = run.server.weights().numpy()
        except BaseException:
            run.shutdown()
            raise
        run.events.append(Event(run.step, "resumed", path=str(path)))
        if run.progress:
            print(f"resumed from {path} at step {run.step}")
        return run

    def kill_worker(self, name: str) -> None:
        """Kill one worker's process, as if its machine went away (notebook 08 on the real pair): the
        next step finds it gone and drops it (``loop.drop_lost``)."""
        self.index(name)                 # a name that is not a worker's: one line
        _kill(self.actors.get(name))

    def shutdown(self) -> None:
        """Stop this training's actors (not Ray itself); the weights stay readable."""
        actors = self.__dict__.get("actors", {})
        while actors:
            _kill(actors.popitem()[1])

    @property
    def is_shut_down(self) -> bool:
        """True once ``shutdown`` stopped the workers."""
        return not self.actors

    def __enter__(self) -> "ParameterServerTraining":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def resume_state(checkpoint: dict, server) -> tuple[Stream, int]:
    """The weights and the optimizer's state back into ``server``; the data cursor and the step returned
    (notebook 08): the next step trains what the first run's next step would have."""
    server.load_state(checkpoint["server"])
    return Stream.from_state(checkpoint["stream"]), checkpoint["step"]


def _label(spec: WorkerSpec, info: dict) -> str:
    """name · device, and what differs from what was asked (simulated, a host's origin label, …)."""
    where = f" ({info['origin']})" if info["origin"] else ""
    return labelled(f"{spec.name} · {info['device']}", spec.slowdown) + where


def _kill(actor) -> None:
    if actor is not None:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
