"""Heterogeneous parameter-server training on Ray: sync, async, local SGD (notebooks 05, 06, 08).

``ParameterServerTraining`` holds one ``Server`` in the driver's process, one ``Member`` per live
worker (its actor, batch size and local SGD's H), the one cursor into the shuffled data
(``hetlab.core.stream.Stream``), the run's records and events; ``run`` calls ``hetlab.ps.loop`` with
hooks around it. It is the one writer of the split (``resplit``), which every change leaves an event of.
``save_checkpoint`` and ``resume`` save a run and continue it exactly (notebook 08).
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
from hetlab.ps.hooks import FollowSplit
from hetlab.ps.loop import async_updates, collect, drop_lost, local_sgd_round, sync_step, sync_steps
from hetlab.ps.server import Server
from hetlab.ps.specs import (Options, WorkerSpec, actor_options, check_batch_sizes, check_count,
                             check_local_steps, check_positive, check_spec)
from hetlab.ps.records import Event, StepRecord, per_worker_samples_per_s
from hetlab.ps.worker import Worker
from hetlab.core.train import evaluate, held_out
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN

__all__ = ["WorkerSpec", "StepRecord", "ParameterServerTraining"]
KEEP_CHECKPOINTS = 3  # automatic checkpoints kept in their folder (the newest ones)


@dataclasses.dataclass
class Member:
    """One worker of a running training: what it is, its share of the work (``batch_size`` and local
    SGD's H), its actor, what it reported when it started (``Worker.info``), the batch sizes it has warmed up."""

    spec: WorkerSpec
    batch_size: int
    local_steps: int                 # H: local SGD's steps per round (other modes: unused)
    actor: object = None
    info: dict = dataclasses.field(default_factory=dict)
    warm: set = dataclasses.field(default_factory=set)

    name = property(lambda self: self.spec.name)


class ParameterServerTraining:
    """Train one model on unlike workers through a parameter server (notebooks 05, 06, 08).

    ``**options``: those of ``Options`` (``mode``, ``lr``, ``optimizer``, …; ``training.options``). Weights
    travel once per step in fp32, gradients in ``transfer``; ``bytes_sent`` counts both ways. ``model``,
    ``train_data``, ``loss``: yours or the built-ins (as ``train``). A context manager, or ``shutdown()``."""

    # progress: a bar over each run's steps; checkpoint_dir + checkpoint_every: a checkpoint every that
    # many steps, the newest KEEP_CHECKPOINTS kept (async takes them at rest). worker_timeout_s: how long the driver waits for an answer (and,
    # grown with the machine's load by machine.patience, for a worker to start).
    # local_steps: local SGD's H, one for all or one per worker (speed-scaled, notebook 08).
    def __init__(self, workers: list[WorkerSpec], train_data, model="small", *, batch_sizes: list[int] | None = None,
                 local_steps: int | list[int] = 8, loss=None, checkpoint_dir=None, checkpoint_every: int = 0,
                 progress: bool = True, worker_timeout_s: float = 120.0, **options):
        if isinstance(workers, WorkerSpec) or not isinstance(workers, (list, tuple)) or not workers:
            raise HetlabError("workers must be a non-empty list of WorkerSpec, e.g. [WorkerSpec('desktop')].")
        for spec in workers:
            check_spec(spec)
        if len({s.name for s in workers}) != len(workers):
            raise HetlabError(f"worker names {[s.name for s in workers]} must be distinct.")
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(Options)})
        if unknown:
            raise HetlabError(f"unknown option {unknown[0]!r}: the options are those of hetlab.ps.specs.Options.")
        self.options = Options(**options)  # checked here, once
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
        self.members = [Member(s, b, h) for s, b, h in zip(workers, sizes, hs)]
        self.timeout_s = worker_timeout_s
        self.weights_bytes = BYTES_PER_VALUE[WEIGHTS_DOWN] * self.n_params           # one message down
        self.gradient_bytes = BYTES_PER_VALUE[self.options.transfer] * self.n_params  # one answer up
        self.weights = None   # the server's weights as the next calls carry them: a numpy array, which Ray
        #                       sends inside the call (up to 100 KiB) or through its object store
        self.step = self.first_step = self.samples_seen = self.bytes_to_workers = self.bytes_to_server = self.warmups = 0
        self.records: list[StepRecord] = []
        self.events: list[Event] = []   # resplits, lost workers, checkpoints, … (hetlab.ps.records)
        self.data_len = n_samples(payload)
        self.stream = Stream()  # the one cursor into the shuffled data (hetlab.core.data.epoch_order)
        self._follow: dict = {}  # retune_every → its FollowSplit, kept between runs (its looks)
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
        data = ray.put(train_data)  # once; each worker's node fetches it once
        for m, options in zip(self.members, where):
            opts = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0, **options}
            m.actor = ray.remote(Worker).options(**opts).remote(m.spec, data, self.factory, self.options, self.loss)
        o = self.options
        self.server = Server(self.factory, o.seed, o.lr, o.mode, o.optimizer)
        refs = [m.actor.info.remote() for m in self.members]
        window = patience(self.timeout_s)   # a start: a new process imports torch; a busy machine is slower
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=window)
        if len(ready) < len(refs):
            late = [m.name for m, r in zip(self.members, refs) if r not in ready]
            raise HetlabError(f"workers {late} did not start within {window:.0f} s: "
                              f"check hetlab.cluster.node_table() shows their machines.")
        try:
            for m, info in zip(self.members, ray.get(refs)):
                m.info = info
        except ray.exceptions.RayError as e:
            raise HetlabError(f"a worker failed to start: {one_line(e)}") from None
        machines = [m.info["machine"] for m in self.members]  # each worker: its machine's share of cores
        self.answers({m.name: m.actor.set_threads.remote(machines.count(m.info["machine"])) for m in self.members},
                     "starting", then="check hetlab.cluster.node_table() shows its machine and start again")
        self.weights = self.server.weights().numpy()
        if self.progress:
            for label in self.labels:
                print(f"worker {label}")

    # --- what it is -----------------------------------------------------------------------
    mode = property(lambda self: self.options.mode, doc='"sync", "async" or "local_sgd" (``options``).')

    @property
    def workers(self) -> list[WorkerSpec]:
        """The live workers' specs, in order (a lost worker is dropped)."""
        return [m.spec for m in self.members]

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.members]

    @property
    def labels(self) -> list[str]:
        """Learner-facing worker labels: name · device (simulated …× slower)."""
        return [_label(m) for m in self.members]

    @property
    def batch_sizes(self) -> list[int]:
        return [m.batch_size for m in self.members]

    @property
    def local_steps(self) -> list[int]:
        """Local SGD's H per live worker (one list, even when one H was given for all)."""
        return [m.local_steps for m in self.members]

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise HetlabError(f"no worker named {name!r} (workers: {self.names}).")

    @property
    def bytes_sent(self) -> int:
        """Bytes moved both ways: weights to workers (fp32) + gradients/deltas to the server."""
        return self.bytes_to_workers + self.bytes_to_server

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_sent / self.samples_seen if self.samples_seen else 0.0

    # --- changing it between runs ---------------------------------------------------------
    def resplit(self, sizes: list[int], why: str = "set", **seen) -> Event | None:
        """Give each worker its batch size (one whole number ≥ 1 per worker): every change of the
        split goes through here and leaves a "resplit" ``Event`` saying ``why`` (``seen``: what
        ``FollowSplit`` saw); returns it, or None when nothing changed."""
        sizes, before = check_batch_sizes(sizes, len(self.members)), self.batch_sizes
        if sizes == before:
            return None
        for m, b in zip(self.members, sizes):
            m.batch_size = b
        self.events.append(Event(self.step, "resplit", why, tuple(before), tuple(sizes), **seen))
        return self.events[-1]

    def set_local_steps(self, local_steps) -> None:
        """Local SGD's H from the next round on: one for all, or one per worker (notebook 08)."""
        for m, h in zip(self.members, check_local_steps(local_steps, len(self.members))):
            m.local_steps = h

    def set_slowdown(self, name: str, slowdown: float) -> None:
        """Make worker ``name`` a *simulated* ``slowdown``× slower device from the next step on
        (notebook 06: a laptop that throttles as it heats; a "slowdown" ``Event``). 1 = its own speed."""
        m = self.member(name)
        spec = dataclasses.replace(m.spec, slowdown=slowdown)
        check_spec(spec)
        self.answers({name: m.actor.set_slowdown.remote(spec.slowdown)}, "setting its slowdown")
        m.spec = spec
        self.events.append(Event(self.step, "slowdown", worker=_label(m), slowdown=spec.slowdown))

    def warm_up(self) -> None:
        """Before steps at a batch size a worker has not run yet: one untimed forward + backward there
        (``Worker.warm``), so no recorded step pays for compiling the new shape (MPS compiles per shape;
        ``hetlab.core.train.warm_up``). A worker that fails here is left to the step, which drops it."""
        refs = {m.actor.warm.remote(m.batch_size, self.mode == "local_sgd"): m
                for m in self.members if m.batch_size not in m.warm}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout_s) if refs else ([], [])
        for ref in ready:
            try:
                ran = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            refs[ref].warm.add(refs[ref].batch_size)
            self.warmups += int(ran)

    def answers(self, refs: dict, what: str, then: str = "run a step (it drops a lost worker) and try again") -> dict:
        """{name: answer} of calls to the workers named in ``refs`` ({name: a call's ref}) within the
        deadline; a worker that went away is one line, not Ray's traceback."""
        got, lost = collect(self, refs)
        if lost:
            who = "; ".join(f"{self.member(name).spec.label}: {why}" for name, why in lost.items())
            raise HetlabError(f"a worker went away while {what} ({who}): {then}.")
        return got

    # --- training -------------------------------------------------------------------------
    def run(self, steps: int, batch_sizes: list[int] | None = None, retune_every: int = 0,
            hooks: list = ()) -> list[StepRecord]:
        """Train ``steps`` server updates (local SGD: rounds of H local steps); returns their records.

        ``hooks``: callbacks, each called as ``hook(training)`` after every step (``hetlab.ps.hooks``).
        ``retune_every=N`` (sync and local SGD) adds ``FollowSplit(N)``: every N steps, re-split the
        global batch for the measured speeds when that gains more than 5 % (notebook 06).
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise HetlabError(f"steps must be a whole number ≥ 0, got {steps!r}.")
        if isinstance(retune_every, bool) or not isinstance(retune_every, int) or retune_every < 0:
            raise HetlabError(f"retune_every must be a whole number of steps ≥ 0, got {retune_every!r}.")
        if retune_every and self.mode == "async":
            raise HetlabError("retune_every is for mode 'sync' or 'local_sgd': in async mode nobody "
                              "waits for a straggler, so there is no split to follow.")
        if self.is_shut_down:
            raise HetlabError("this training is shut down: start a new ParameterServerTraining.")
        follow = [self._follow.setdefault(retune_every, FollowSplit(retune_every))] if retune_every else []
        if batch_sizes is not None:
            self.resplit(batch_sizes, "set")
        bar = progress_bar(steps, f"{self.mode}, {len(self.members)} workers", self.progress)

        def show(run):
            bar.update(1)
            bar.set_postfix(loss=f"{run.records[-1].loss:.3f}", refresh=False)

        try:
            return self._steps(steps, [*follow, show, *hooks], checkpoints=True)
        finally:
            bar.close()

    def _steps(self, steps: int, callbacks: list, checkpoints: bool) -> list[StepRecord]:
        """``steps`` steps of this run's mode at the current split, the callbacks after each: their records."""
        start, self.first_step = len(self.records), self.step
        if steps:
            self.warm_up()
        if self.mode == "async":
            async_updates(self, steps, callbacks, checkpoints)
        else:
            sync_steps(self, steps, callbacks, checkpoints, local_sgd_round if self.mode == "local_sgd" else sync_step)
        return self.records[start:]

    def checkpoint_due(self) -> bool:
        """An automatic checkpoint is due after this step (``checkpoint_dir`` and ``checkpoint_every``)."""
        return bool(self.checkpoint_dir and self.checkpoint_every and self.step % self.checkpoint_every == 0)

    def auto_checkpoint(self) -> None:
        """A checkpoint in ``checkpoint_dir`` (``step-NNNNNN.pt``), keeping the newest ``KEEP_CHECKPOINTS``."""
        self.save_checkpoint(checkpoint_path(self.checkpoint_dir, self.step))
        for old in sorted(Path(self.checkpoint_dir).glob(CHECKPOINT_GLOB))[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)

    def measure(self, batch_sizes: list[int], steps: int = 3) -> list[float]:
        """Per-worker samples/s (compute + simulated + comm) over ``steps`` real steps at these sizes.

        The steps train the model for real, with no hooks (no bar, no checkpoint); the batch
        sizes are put back afterwards. A worker whose batch size is new to it first runs one
        untimed warm-up step (``run`` does): the first step at a new shape is slow on MPS and
        would bias ``auto_tune`` against the Mac.
        """
        old = list(self.batch_sizes)
        try:
            self.resplit(batch_sizes, "measure")
            records = self._steps(steps, [], checkpoints=False)
        finally:
            if len(old) == len(self.workers):
                self.resplit(old, "measure")
        names = [s.name for s in self.workers]
        return per_worker_samples_per_s(records, names)

    def standalone_samples_per_s(self, batch_size, steps: int = 5) -> list[float]:
        """Each worker training on its own, one after another (no waiting, no communication):
        samples/s of full steps on its device, simulated slowdown included."""
        sizes = check_batch_sizes([batch_size] * len(self.workers) if isinstance(batch_size, int)
                                  else batch_size, len(self.workers))
        weights, got = self.server.weights(), {}
        for m, b in zip(self.members, sizes):
            got |= self.answers({m.name: m.actor.standalone.remote(weights, b, steps)}, "timing it alone")
        return [got[m.name] for m in self.members]

    def run_checked(self, steps: int, test_data, every: int, test_samples: int = 1000,
                    batch_sizes: list[int] | None = None) -> tuple[list[StepRecord], dict]:
        """``run`` with its time to target measurable (notebooks 05, 08): every ``every`` steps, the
        weights are evaluated on ``test_samples`` test samples (``held_out``), untimed. Returns the records and
        ``{"checks": [(training seconds so far, accuracy)], "every", "test_samples", "unit"}`` for
        ``outcome.technique(..., checked=...)``."""
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

    # --- checkpoints (notebook 08) ------------------------------------------------------------
    def save_checkpoint(self, path=None) -> Path:
        """What the run needs to go on → ``path`` on the DRIVER's disk, atomically (default:
        ``checkpoint_dir``/step-NNNNNN.pt): the server's weights and optimizer, each worker's own
        state (local SGD's inner Adam), the data cursor, the step and counters, the batch sizes and
        the ``Options`` whole. Call it when nothing is in flight (between ``run`` calls, or from a
        hook's ``at_rest``): the cursor then counts exactly the samples of the updates the server
        has applied. A worker gone since its last step is dropped first, as a step drops it."""
        if path is None:
            if not self.checkpoint_dir:
                raise HetlabError("give save_checkpoint(path) or checkpoint_dir=... when starting.")
            path = checkpoint_path(self.checkpoint_dir, self.step)
        local, lost = collect(self, {m.name: m.actor.local_state.remote() for m in self.members})
        drop_lost(self, lost, {})   # nothing is in flight: no positions to give back
        state = {"format": FORMAT, "model": self.model_name, "signature": param_signature(self.factory),
                 "options": dataclasses.asdict(self.options), "step": self.step, "samples_seen": self.samples_seen,
                 "server": self.server.state(), "workers": [{"name": n, **local[n]} for n in self.names],
                 "batch_sizes": self.batch_sizes, "local_steps": self.local_steps, "stream": self.stream.state(),
                 "data_len": self.data_len, "bytes_to_workers": self.bytes_to_workers,
                 "bytes_to_server": self.bytes_to_server}
        path = save_checkpoint(state, path)
        self.events.append(Event(self.step, "checkpoint", path=str(path)))
        return path

    @classmethod
    def resume(cls, path, workers: list[WorkerSpec], train_data, **overrides) -> "ParameterServerTraining":
        """A new training continuing bit for bit where the checkpoint at ``path`` stopped.

        Its options and batch sizes come from the checkpoint; ``overrides`` may change e.g.
        ``progress`` or ``checkpoint_dir``. Give one WorkerSpec per saved worker. A run of your
        own model needs ``model=`` its factory again (and ``loss=`` if not the default)."""
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
            run.answers({m.name: m.actor.load_local_state.remote(w) for m, w in zip(run.members, saved)},
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
        """Kill one worker's process, as if its machine went away (notebook 08 on the real pair)."""
        _kill(self.member(name).actor)

    # --- lifetime -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop this training's actors (not Ray itself); safe to call twice. The server's weights
        stay: ``model()`` and ``evaluate()`` still read them."""
        for m in self.__dict__.get("members", []):
            _kill(m.actor)
            m.actor = None

    @property
    def is_shut_down(self) -> bool:
        """True once ``shutdown`` stopped the workers (the notebook 06 tuner checks it)."""
        return all(m.actor is None for m in self.members)

    def __enter__(self) -> "ParameterServerTraining":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def resume_state(checkpoint: dict, server) -> tuple[Stream, int]:
    """What makes a resumed run continue bit for bit (notebook 08): the weights and the optimizer's
    state (Adam's moments and step count) back into the new run's ``server``, and the data cursor
    and the step returned, so the next step trains the samples and makes the update the first
    run's next step would have."""
    server.load_state(checkpoint["server"])
    return Stream.from_state(checkpoint["stream"]), checkpoint["step"]


def _label(m: Member) -> str:
    """name · device, and what differs from what was asked (simulated, a host's origin label, …)."""
    spec, info = m.spec, m.info
    where = f" ({info['origin']})" if info["origin"] else ""
    note = f" ({info['device_note']})" if info["device_note"] else ""  # e.g. Ray gave it a GPU torch cannot use
    return labelled(f"{spec.name} · {info['device']}{note}", spec.slowdown) + where


def _kill(actor) -> None:
    if actor is not None:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
