"""Heterogeneous parameter-server training on Ray: sync, async, local SGD (notebooks 05, 06, 08).

``ParameterServerTraining`` keeps one ``Server`` in the driver's process (weights +
optimizer; ``hetlab.ps.server`` says why not an actor) and starts one ``Worker`` actor per
``WorkerSpec`` (pinned to its machine, own device, own batch size; the training set goes
into Ray's object store once and each worker keeps a copy on its device). The driver owns
the one cursor into the shuffled data (``self.stream``, ``hetlab.data.Stream``) and tells
each message which positions to train on, so every sample is drawn at the same rate whatever
the split, and a lost worker's samples are trained by the others. Each step the server's new
weights exist ONCE and every worker gets the same ones (a big model's put once into Ray's
object store); each worker sends back one flat CPU buffer (fp32, or fp16/bf16 with
``transfer=``). Weights always travel in fp32. A small model's buffers travel in pieces that
Ray hands inside the calls instead of through its object store (``hetlab.flat.pieces_for``).
``bytes_sent`` counts both directions. Every step records, per worker, where the time went:

* ``compute_s``: measured by the worker around its forward/backward (device synced);
* ``simulated_s``: the sleep of a *simulated* slower device ((N−1) × that work's typical
  compute_s, ``hetlab.simulate``);
* ``comm_s``: the round trip the driver measured (submit → result ready) minus the
  worker's own compute_s + simulated_s: sending weights and gradient, serialising,
  Ray's scheduling;
* ``wait_s``: sync — from this worker's result being ready to the step's last one
  (idle behind the straggler); async — idle before this message started (held back
  by the staleness bound, or waiting for the server's update of its last gradient);
* ``server_s`` (same for a whole step): combining + the optimizer step on the server;
* ``update_s`` (same for a whole step): the driver's time for that update: fetching the
  gradients (a small model's came with the workers' answers), ``server_s``, and making the
  new weights ready to send (a big model's put into Ray's object store).

Machines whose speed changes: ``run(steps, retune_every=N)`` re-splits the global batch
every N steps when the measured speeds call for it (notebook 06), and ``set_slowdown``
makes a worker a simulated slower device mid-run. Local SGD takes one H for all, or one
per worker (``balance.scale_local_steps``: speed-scaled, notebook 08).

The steps themselves are methods of its base class, ``hetlab.ps.engine.Engine``; plain
data and arithmetic in ``hetlab.ps.specs``; the server in ``hetlab.ps.server``, the worker
actor in ``hetlab.ps.worker``.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import ray
import torch

from hetlab import gpus, progress_bar
from hetlab.balance import fit_step_time, follow_split
from hetlab.checkpoint import FORMAT, load_checkpoint, param_signature, save_checkpoint
from hetlab.cluster import connect, placement, role_resource
from hetlab.data import Dataset, Stream, as_tensors, compact, n_samples
from hetlab.errors import HetlabError
from hetlab.flat import flat_weights, load_flat, pieces_for
from hetlab.models import as_factory, as_loss, check_model_and_loss, make_model, model_label
from hetlab.ps.engine import Engine, _one_line
from hetlab.ps.server import Server
from hetlab.ps.specs import (StepRecord, WorkerSpec, check_batch_sizes,
                             check_local_steps, check_options, check_spec, per_worker_samples_per_s,
                             samples_per_s)
from hetlab.ps.worker import Worker
from hetlab.simulate import labelled
from hetlab.train import evaluate
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN


def model_from_flat(name, flat: torch.Tensor) -> torch.nn.Module:
    """A fresh ``name`` model (a built-in name or a factory) holding the weights in ``flat`` (CPU)."""
    model = make_model(name, seed=None)
    if flat.numel() != flat_weights(model).numel():
        raise HetlabError(f"{flat.numel()} weights do not fit model {model_label(name)!r}.")
    load_flat(model, flat.float())
    return model


__all__ = ["WorkerSpec", "StepRecord", "ParameterServerTraining"]
KEEP_CHECKPOINTS = 3  # automatic checkpoints kept in checkpoint_dir (the newest ones)


@dataclasses.dataclass
class Member:
    """One worker of a running training, all in one place: what it is, its share of the work,
    its actor, what it reported when it started, and what the driver remembers of it."""

    spec: WorkerSpec
    batch_size: int
    local_steps: int                 # H: local SGD's steps per round (other modes: unused)
    actor: object = None             # its Worker actor, once started
    info: dict = dataclasses.field(default_factory=dict)       # Worker.info(): host, device, ...
    warm_sizes: set = dataclasses.field(default_factory=set)   # batch sizes it has warmed up
    look: tuple | None = None        # retune_every: (samples per step, busy s) at the last look


class ParameterServerTraining(Engine):
    """Train one model on unlike workers through a parameter server (notebooks 05, 06, 08).

    ``mode="sync"``: every step all workers compute on the same weights, the server
    combines Σ (b_i/Σb)·g_i and steps. ``"async"``: each gradient is applied as it
    arrives (scaled b_i/mean b), with staleness ≤ ``max_staleness`` guaranteed by making
    a fast worker WAIT (never by discarding work). ``"local_sgd"``: each worker takes
    ``local_steps`` Adam steps of its own (or one H per worker: speed-scaled, notebook 08),
    the server averages the weight deltas (weighted by samples) and applies them with outer
    SGD (Nesterov when ``outer_momentum`` > 0, as in DiLoCo); one step = one such round. The server's
    optimizer in sync and async modes is Adam, or plain SGD with ``optimizer="sgd"``.
    Use as a context manager, or call ``shutdown()``.

    Your own model and data: ``model=`` a built-in name or a factory (a picklable function
    returning an ``nn.Module``), ``train_data`` a hetlab Dataset, ``(x, y)`` tensors or a
    map-style torch Dataset, ``loss=`` any ``loss(outputs, labels)`` (default cross-entropy).
    """

    def __init__(self, workers: list[WorkerSpec], train_data, model="small",
                 lr: float = 1e-3, mode: str = "sync", max_staleness: int = 2,
                 local_steps: int = 8, outer_lr: float = 1.0, outer_momentum: float = 0.0,
                 transfer: str = "fp32", seed: int = 0, checkpoint_dir=None,
                 checkpoint_every: int = 0, progress: bool = True,
                 batch_sizes: list[int] | None = None, worker_timeout_s: float = 120.0,
                 loss=None, optimizer: str = "adam"):
        if isinstance(workers, WorkerSpec) or not isinstance(workers, (list, tuple)) or not workers:
            raise HetlabError("workers must be a non-empty list of WorkerSpec, e.g. [WorkerSpec('desktop')].")
        for spec in workers:
            check_spec(spec)
        if len({s.name for s in workers}) != len(workers):
            raise HetlabError(f"worker names {[s.name for s in workers]} must be distinct.")
        payload = compact(train_data)  # what goes into Ray's object store (checks the data's form)
        check_options(mode, transfer, max_staleness, local_steps, outer_lr, outer_momentum,
                      lr, checkpoint_every, payload, len(workers), optimizer)
        factory, loss = as_factory(model), as_loss(loss)  # a bad name or factory → HetlabError now
        probe = (Dataset(payload.images[:2], payload.labels[:2]) if isinstance(payload, Dataset)
                 else (payload[0][:2], payload[1][:2]))
        check_model_and_loss(factory, loss, *as_tensors(probe))  # shapes that don't fit → now
        sizes = check_batch_sizes(batch_sizes or [64] * len(workers), len(workers))
        self.members = [Member(spec, b, h) for spec, b, h in
                        zip(workers, sizes, check_local_steps(local_steps, len(workers)))]
        self.factory, self.loss = factory, loss
        self.model_name = model_label(model)  # a built-in name, or the factory's qualified name
        self.lr, self.mode, self.seed, self.optimizer = lr, mode, seed, optimizer
        self.max_staleness = max_staleness
        self.outer_lr, self.outer_momentum, self.transfer = outer_lr, outer_momentum, transfer
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.progress, self.worker_timeout_s = progress, worker_timeout_s
        self.records: list[StepRecord] = []
        self.events: list[dict] = []
        self.step = self.samples_seen = self.bytes_to_workers = self.bytes_to_server = 0
        self.n_params = flat_weights(make_model(factory, seed=None)).numel()
        self.weights_bytes = BYTES_PER_VALUE[WEIGHTS_DOWN] * self.n_params        # one message down
        self.gradient_bytes = BYTES_PER_VALUE[self.transfer] * self.n_params      # one message up
        self.pieces = {"weights": pieces_for(self.weights_bytes),  # hetlab.flat: small buffers go inside calls
                       "gradient": pieces_for(self.gradient_bytes)}
        self.data_len = n_samples(payload)
        self.stream = Stream()  # the one cursor into the shuffled data (hetlab.data.epoch_order)
        self.server = None
        self.warmups = 0  # untimed warm-up steps the workers ran (one per worker and new batch size)
        _ensure_ray()
        where = [actor_options(s) for s in workers]
        gpus.check_free([(s.name, s.role) for s, p in zip(workers, where) if p.get("num_gpus")])
        try:
            self._start(payload, where)
        except BaseException:
            self.shutdown()
            raise

    # --- start-up -------------------------------------------------------------------------
    def _start(self, train_data, where: list[dict]) -> None:
        data = ray.put(train_data)  # once; each worker's node fetches it once
        for m, options in zip(self.members, where):
            opts = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0, **options}
            spec = m.spec
            m.actor = ray.remote(Worker).options(**opts).remote(
                spec.name, data, self.factory, spec.device, spec.slowdown,
                spec.precision, self.transfer, self.seed, self.lr, self.loss)
        self.server = Server(self.factory, self.seed, self.lr, self.mode, self.outer_lr,
                             self.outer_momentum, self.optimizer)
        refs = [m.actor.info.remote() for m in self.members]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.worker_timeout_s)
        if len(ready) < len(refs):
            late = [s.name for s, r in zip(self.workers, refs) if r not in ready]
            raise HetlabError(f"workers {late} did not start within {self.worker_timeout_s:.0f} s: "
                              f"check hetlab.cluster.node_table() shows their machines.")
        try:
            for m, info in zip(self.members, ray.get(refs)):
                m.info = info
        except ray.exceptions.RayError as e:
            raise HetlabError(f"a worker failed to start: {_one_line(e)}") from None
        per_host: dict[str, int] = {}
        for m in self.members:
            per_host[m.info["host"]] = per_host.get(m.info["host"], 0) + 1
        self._answers({i: m.actor.set_threads.remote(per_host[m.info["host"]])
                       for i, m in enumerate(self.members)},
                      "starting", then="check hetlab.cluster.node_table() shows its machine and start again")
        self._weights = self._publish(self.server.weights())
        if self.progress:
            for label in self.labels:
                print(f"worker {label}")

    # --- the workers, one Member each -------------------------------------------------------
    @property
    def workers(self) -> list[WorkerSpec]:
        """The live workers' specs, in order (a lost worker is dropped)."""
        return [m.spec for m in self.members]

    @property
    def worker_info(self) -> list[dict]:
        """What each live worker reported when it started: host, node, device, precision."""
        return [m.info for m in self.members]

    @property
    def batch_sizes(self) -> list[int]:
        return [m.batch_size for m in self.members]

    @batch_sizes.setter
    def batch_sizes(self, sizes: list[int]) -> None:
        for m, b in zip(self.members, check_batch_sizes(sizes, len(self.members))):
            m.batch_size = b

    @property
    def local_steps(self) -> list[int]:
        """Local SGD's H per live worker (one list, even when one H was given for all)."""
        return [m.local_steps for m in self.members]

    def index_of(self, name: str) -> int:
        """Position of the live worker called ``name`` (positions shift when a worker is lost)."""
        for i, m in enumerate(self.members):
            if m.spec.name == name:
                return i
        raise HetlabError(f"no worker named {name!r} (workers: {[s.name for s in self.workers]}).")

    @property
    def labels(self) -> list[str]:
        """Learner-facing worker labels: name · device precision (simulated …× slower)."""
        out = []
        for m in self.members:
            spec, info = m.spec, m.info
            prec = info["precision"]
            if spec.precision != prec:  # the CPU trains in fp32; a GPU may lack bf16
                prec += f" ({spec.precision} off on {info['device'].split(':')[0]})"
            where = f" (rehearsal host {info['rehearsal']})" if info.get("rehearsal") else ""
            note = f" ({info['device_note']})" if info.get("device_note") else ""  # cuda:N, see worker
            out.append(labelled(f"{spec.name} · {info['device']}{note} {prec}", spec.slowdown) + where)
        return out

    @property
    def bytes_sent(self) -> int:
        """Bytes moved both ways: weights to workers (fp32) + gradients/deltas to the server."""
        return self.bytes_to_workers + self.bytes_to_server

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_sent / self.samples_seen if self.samples_seen else 0.0

    def set_batch_sizes(self, sizes: list[int]) -> None:
        """Give each worker its batch size (one whole number ≥ 1 per worker)."""
        self.batch_sizes = sizes

    def steps_per_message(self, i: int) -> int:
        """The steps behind worker i's one message: H in local SGD, else 1."""
        return self.members[i].local_steps if self.mode == "local_sgd" else 1

    def set_local_steps(self, local_steps) -> None:
        """Local SGD's H from the next round on: one for all, or one per worker (notebook 08)."""
        for m, h in zip(self.members, check_local_steps(local_steps, len(self.members))):
            m.local_steps = h

    def set_slowdown(self, name: str, slowdown: float) -> None:
        """Make worker ``name`` a *simulated* ``slowdown``× slower device from the next step on
        (notebook 06: a laptop that throttles as it heats). 1 = its own speed; labels say it."""
        i = self.index_of(name)
        m = self.members[i]
        spec = dataclasses.replace(m.spec, slowdown=slowdown)
        check_spec(spec)
        self._answers({i: m.actor.set_slowdown.remote(spec.slowdown)}, "setting its slowdown")
        m.spec = spec
        m.look = None  # its speed changed: what retune_every saw of it is out of date
        self.events.append({"event": "slowdown", "step": self.step, "worker": self.labels[i]})

    # --- training -------------------------------------------------------------------------
    def run(self, steps: int, batch_sizes: list[int] | None = None,
            retune_every: int = 0) -> list[StepRecord]:
        """Train ``steps`` server updates (local SGD: rounds of H local steps); returns their records.

        ``retune_every=N`` (sync and local SGD): every N steps, measure each worker's
        samples/s over those N steps and re-split the global batch ∝ them when that gains
        more than 5 % of predicted efficiency (``balance.follow_split``; notebook 06).
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
        if batch_sizes is not None:
            self.set_batch_sizes(batch_sizes)
        if steps:
            self._warm_up()
        start = len(self.records)
        bar = progress_bar(steps, f"{self.mode}, {len(self.workers)} workers", self.progress)
        try:
            if self.mode == "async":
                self._async_updates(steps, bar)
            else:
                window = len(self.records)  # the records since the last look at the speeds
                for k in range(1, steps + 1):
                    self._sync_round()
                    if retune_every and k % retune_every == 0:
                        self._follow_speeds(self.records[window:])
                        window = len(self.records)
                    bar.update(1)
                    bar.set_postfix(loss=f"{self.records[-1].loss:.3f}", refresh=False)
                    if self.checkpoint_due():
                        self.save_due_checkpoint()
        finally:
            bar.close()
        return self.records[start:]

    def _follow_speeds(self, records: list[StepRecord]) -> None:
        """Re-split the global batch for the speeds in ``records`` if that gains enough.

        Each worker's step takes about fixed + batch / speed seconds on its device
        (compute + simulated), plus its communication. The last two looks at different
        sizes give both terms (``balance.fit_step_time``: a line through two points); with
        one size only, fixed = 0.
        The fixed part matters: a smaller share does not shrink a step's fixed cost, and
        ignoring it would move the split further at every look. ``balance.follow_split``
        then finds the split where every worker finishes together.
        """
        speeds, overheads = [], []
        for m in self.members:
            mine = [r for r in records if r.worker == m.spec.name]
            if not mine:
                return  # a worker has no record here (one was just lost): look again next time
            n = sum(r.batch_size for r in mine) / len(mine)  # per step (local SGD: per inner step)
            busy = sum((r.compute_s + r.simulated_s) * r.batch_size / r.samples for r in mine) / len(mine)
            looks = [m.look, (n, busy)] if m.look else [(n, busy)]
            speed, fixed = fit_step_time(*zip(*looks), min_spread=0.0)
            m.look = (n, busy)
            speeds.append(speed)
            overheads.append(fixed + sum(r.comm_s for r in mine) / len(mine))
        sizes = follow_split(self.batch_sizes, speeds, overheads)
        if sizes != self.batch_sizes:
            self.events.append({"event": "split_retuned", "step": self.step, "from": list(self.batch_sizes),
                                "to": sizes, "samples_per_s": speeds, "fixed_s": overheads})
            self.batch_sizes = sizes
            self._warm_up()  # the new sizes' first step is not timed (MPS compiles per shape)

    def _warm_up(self) -> None:
        """Before steps at a batch size a worker has not run yet: one untimed forward + backward
        there (``Worker.warm``), so no recorded step pays for compiling the new shape (MPS
        compiles per shape; ``hetlab.devices.warm_up`` says why every device does it). Sizes
        already warmed cost nothing, not even a message. A worker that fails here is left
        to the step itself, which handles a lost worker."""
        local = self.mode == "local_sgd"
        refs = {m.actor.warm.remote(m.batch_size, local): (m, m.batch_size)
                for m in self.members if m.batch_size not in m.warm_sizes}
        if not refs:
            return
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self.worker_timeout_s)
        for ref in ready:
            try:
                ran = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            m, b = refs[ref]
            m.warm_sizes.add(b)
            self.warmups += int(ran)

    # --- measuring ------------------------------------------------------------------------
    def measure(self, batch_sizes: list[int], steps: int = 3) -> list[float]:
        """Per-worker samples/s (compute + simulated + comm) over ``steps`` real steps at these sizes.

        The steps train the model for real; the batch sizes are put back afterwards. A
        worker whose batch size is new to it first runs one untimed warm-up step (``run``
        does, through ``_warm_up``): the first step at a new shape is slow on MPS and
        would bias ``auto_tune`` against the Mac.
        """
        old, progress = list(self.batch_sizes), self.progress
        self.progress = False
        try:
            records = self.run(steps, batch_sizes)
        finally:
            self.progress = progress
            if len(old) == len(self.workers):
                self.batch_sizes = old
        return per_worker_samples_per_s(records, [s.name for s in self.workers])

    def standalone_throughput(self, batch_size, steps: int = 5) -> list[float]:
        """Each worker alone (one after another, no waiting, no communication): samples/s
        of full training steps on its device, simulated slowdown included."""
        sizes = check_batch_sizes([batch_size] * len(self.workers) if isinstance(batch_size, int)
                                  else batch_size, len(self.workers))
        weights = self.server.weights()
        return [self._answers({i: m.actor.standalone.remote(weights, b, steps)}, "timing it alone")[i]
                for i, (m, b) in enumerate(zip(self.members, sizes))]  # one after another

    def samples_per_s(self, records: list[StepRecord] | None = None) -> float:
        """Cluster samples/s over ``records`` (default: all so far)."""
        return samples_per_s(self.records if records is None else records)

    def model(self) -> torch.nn.Module:
        """The current weights in a fresh model, on the CPU."""
        return model_from_flat(self.factory, self.server.weights())

    def evaluate(self, test_data) -> float:
        """Test accuracy of the current weights (on the driver's CPU)."""
        return evaluate(self.model(), test_data, "cpu")

    # --- checkpoints (notebook 08) ---------------------------------------------------------
    def checkpoint_due(self) -> bool:
        """Has the step just reached a multiple of ``checkpoint_every`` (with a checkpoint_dir)?"""
        return bool(self.checkpoint_dir and self.checkpoint_every and self.step % self.checkpoint_every == 0)

    def save_due_checkpoint(self) -> None:
        """The automatic checkpoint: save, and keep only the newest KEEP_CHECKPOINTS files.

        The step loops call it when nothing is in flight (async waits for its messages)."""
        self.save_checkpoint()
        for old in sorted(Path(self.checkpoint_dir).glob("step-*.pt"))[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)

    def save_checkpoint(self, path=None) -> Path:
        """Weights, optimizer, step, the data cursor, … → ``path`` on the DRIVER's disk, atomically.

        Call it between ``run`` calls (the automatic checkpoints are taken inside ``run``
        when nothing is in flight): the cursor then counts exactly the samples of the
        updates the server has applied. A worker that went away since its last step is
        dropped first, as a step drops it (notebook 08), and the checkpoint holds the rest.
        """
        if path is None:
            if not self.checkpoint_dir:
                raise HetlabError("give save_checkpoint(path) or checkpoint_dir=... when starting.")
            path = Path(self.checkpoint_dir) / f"step-{self.step:06d}.pt"
        answers, _, lost = self._gather([m.actor.local_state.remote() for m in self.members], time.perf_counter())
        if lost:  # gone since its last step (the Mac slept just then): dropped as a step drops it
            self._lose(lost)
        local = [answers[i] for i in sorted(answers)]
        state = {
            "format": FORMAT, "model": self.model_name, "signature": param_signature(self.factory),
            "mode": self.mode, "step": self.step, "server": self.server.state(),
            "workers": [{"name": s.name, **state} for s, state in zip(self.workers, local)],
            "batch_sizes": list(self.batch_sizes), "stream": self.stream.state(),
            "data_len": self.data_len, "seed": self.seed, "lr": self.lr, "optimizer": self.optimizer,
            "transfer": self.transfer,
            "max_staleness": self.max_staleness, "local_steps": self.local_steps,
            "outer_lr": self.outer_lr, "outer_momentum": self.outer_momentum,
            "samples_seen": self.samples_seen, "bytes_to_workers": self.bytes_to_workers,
            "bytes_to_server": self.bytes_to_server,
        }
        path = save_checkpoint(state, path)
        self.events.append({"event": "checkpoint", "step": self.step, "path": str(path)})
        return path

    @classmethod
    def resume(cls, path, workers: list[WorkerSpec], train_data,
               **overrides) -> "ParameterServerTraining":
        """A new training continuing exactly where the checkpoint at ``path`` stopped.

        Mode, model, batch sizes, seed … come from the checkpoint; ``overrides`` may
        change e.g. ``progress`` or ``checkpoint_dir``. Give one WorkerSpec per saved worker.
        A run of your own model needs ``model=`` its factory again (and ``loss=`` if not the default).
        """
        model = overrides.pop("model", None)
        ckpt = load_checkpoint(path, model=model)
        saved = ckpt["workers"]
        if not isinstance(workers, (list, tuple)) or len(workers) != len(saved):
            raise HetlabError(f"{path} was saved with {len(saved)} workers ({[w['name'] for w in saved]}): "
                              f"give one WorkerSpec per saved worker.")
        if n_samples(train_data) != ckpt["data_len"]:
            raise HetlabError(f"{path} was trained on {ckpt['data_len']} samples, not {n_samples(train_data)}: "
                              f"resume with the same training data.")
        kwargs = {k: ckpt[k] for k in ("mode", "lr", "seed", "transfer", "max_staleness",
                                       "local_steps", "outer_lr", "outer_momentum", "batch_sizes")}
        kwargs["optimizer"] = ckpt.get("optimizer", "adam")  # checkpoints before it was a choice: Adam
        kwargs.update(overrides)
        if (kwargs["mode"] == "local_sgd") != (ckpt["mode"] == "local_sgd"):
            raise HetlabError(f"{path} is a {ckpt['mode']} checkpoint: local_sgd uses another optimizer, "
                              f"resume it in mode {ckpt['mode']!r}.")
        run = cls(workers, train_data, model=ckpt["model"] if model is None else model, **kwargs)
        try:
            run.server.load_state(ckpt["server"])
            run._answers({i: m.actor.load_local_state.remote(w)
                          for i, (m, w) in enumerate(zip(run.members, saved))},
                         "loading the checkpoint", then="check hetlab.cluster.node_table() and resume again")
            run.stream = Stream.from_state(ckpt["stream"])
            run.step, run.samples_seen = ckpt["step"], ckpt["samples_seen"]
            run.bytes_to_workers, run.bytes_to_server = ckpt["bytes_to_workers"], ckpt["bytes_to_server"]
            run._weights = run._publish(run.server.weights())
        except BaseException:
            run.shutdown()
            raise
        run.events.append({"event": "resumed", "step": run.step, "path": str(path)})
        if run.progress:
            print(f"resumed from {path} at step {run.step}")
        return run

    def kill_worker(self, name: str) -> None:
        """Kill one worker's process, as if its machine went away (notebook 08 on the real pair)."""
        ray.kill(self.members[self.index_of(name)].actor)

    # --- lifetime -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop this training's actors (not Ray itself); safe to call twice. The server, in the
        driver, stays: ``model()`` and ``evaluate()`` still read its weights."""
        for m in self.members:
            if m.actor is not None:
                try:
                    ray.kill(m.actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            m.actor = None

    @property
    def is_shut_down(self) -> bool:
        """True once ``shutdown`` stopped the workers (the notebook 06 tuner checks it)."""
        return all(m.actor is None for m in self.members)

    def __enter__(self) -> "ParameterServerTraining":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def actor_options(spec: WorkerSpec) -> dict:
    """Actor options pinning a worker to its machine; a GPU worker asks Ray for the GPU.

    ``device="cuda"``/``"mps"`` always asks for it (so Ray accounts for the card and
    keeps other GPU work off it), and on a cluster of several machines needs a role (Ray
    reports the Mac's GPU as ``GPU: 1`` too); ``"auto"`` asks when the worker's node has a GPU.
    """
    kind = str(spec.device).split(":")[0]
    if kind in ("cuda", "mps") and spec.role is None and sum(bool(n.get("Alive")) for n in ray.nodes()) > 1:
        raise HetlabError(f"worker {spec.name!r} asks for device={spec.device!r} but has no role: Ray "
                          f"reports a GPU on the Mac too, so on several machines it could start there; "
                          f"give it role={'desktop' if kind == 'cuda' else 'mac'!r}.")
    gpu = kind in ("cuda", "mps") or (kind == "auto" and spec.role is not None and any(
        n["Resources"].get("GPU", 0) >= 1 and n["Resources"].get(role_resource(spec.role), 0) > 0
        for n in ray.nodes() if n.get("Alive")))
    if spec.role is None and not gpu:
        return {}
    return placement(spec.role, gpu=gpu)


def _ensure_ray() -> None:
    """Connect (embedded local Ray, or HETLAB_ADDRESS / RAY_ADDRESS) if not connected yet."""
    if not ray.is_initialized():
        connect()
