"""The workers of a parameter-server run and the messages to them (notebook 05).

A ``WorkerPool`` holds one ``Member`` per live worker and, for ``hetlab.ps.loop``, can ``submit`` a
message (stream positions + weights; ``submit_round``: local SGD's H steps), wait a ``round`` of answers
and their gradients within a deadline (never an unbounded ``ray.get``), ``drop`` a lost worker,
``publish`` new weights (``flat.pieces_for``) and ``resplit`` the global batch: the one writer of
each member (its split, H and slowdown), which logs what changed as events in the run's ``RunLog``.
"""
from __future__ import annotations

import dataclasses
import re
import time

import ray
import torch

from hetlab.errors import HetlabError
from hetlab.core.flat import join_pieces, pieces_for, split_pieces
from hetlab.ps.messages import (AllWorkersLost, Answer, InFlight, Lost, Resplit, Round, RunLog, Slowdown,
                                WorkerLost, WorkerReply)
from hetlab.ps.options import Options, check_local_steps
from hetlab.ps.specs import WorkerInfo, WorkerSpec, check_batch_sizes, check_spec
from hetlab.core.simulate import labelled
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN


@dataclasses.dataclass
class Member:
    """One worker of a running training: what it is, its share of the work (``batch_size`` and
    local SGD's H), its actor, what it reported when it started. Only the pool writes it
    (``resplit``, ``set_local_steps``, ``set_slowdown``)."""

    spec: WorkerSpec
    batch_size: int
    local_steps: int                 # H: local SGD's steps per round (other modes: unused)
    actor: object = None             # its Worker actor, once started
    info: WorkerInfo | None = None   # Worker.info(): host, device, precision, ...
    warm_sizes: set = dataclasses.field(default_factory=set)   # batch sizes it has warmed up


@dataclasses.dataclass(frozen=True)
class Waited:
    """What ``WorkerPool._wait`` saw: {ref: result}, {ref: when it arrived}, [(key, why it was lost)]."""

    results: dict
    arrived: dict
    lost: list


class WorkerPool:
    """The live workers: submit, a round of answers within a deadline, drop the lost, resplit.
    ``log``: the run's ``RunLog``, where its events go."""

    def __init__(self, members: list[Member], options: Options, n_params: int, timeout_s: float, log: RunLog):
        self.members, self.timeout_s, self.log = members, timeout_s, log
        self.weights_bytes = BYTES_PER_VALUE[WEIGHTS_DOWN] * n_params       # one message down
        self.gradient_bytes = BYTES_PER_VALUE[options.transfer] * n_params  # one message up
        self.pieces = {"weights": pieces_for(self.weights_bytes), "gradient": pieces_for(self.gradient_bytes)}
        self.weights: list = []          # the server's weights as the next messages carry them
        self.bytes_down = self.bytes_up = 0
        self.warmups = 0                 # untimed warm-up steps the workers ran

    # --- who is in it -----------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [m.spec.name for m in self.members]

    @property
    def batch_sizes(self) -> list[int]:
        return [m.batch_size for m in self.members]

    def resplit(self, sizes: list[int], why: str, **seen) -> Resplit | None:
        """Give each live worker its batch size: the one writer of the split once started. A change
        is logged as a ``Resplit`` event (``seen``: what ``FollowSpeeds`` saw) and returned."""
        sizes, before = check_batch_sizes(sizes, len(self.members)), self.batch_sizes
        if sizes == before:
            return None
        for m, b in zip(self.members, sizes):
            m.batch_size = b
        return self.log.event(Resplit(self.log.step, tuple(before), tuple(sizes), why, **seen))

    @property
    def local_steps(self) -> list[int]:
        return [m.local_steps for m in self.members]

    def set_local_steps(self, local_steps) -> None:
        """Local SGD's H from the next round on: one for all, or one per worker (notebook 08)."""
        for m, h in zip(self.members, check_local_steps(local_steps, len(self.members))):
            m.local_steps = h

    def set_slowdown(self, name: str, slowdown: float) -> None:
        """Make worker ``name`` a *simulated* ``slowdown``× slower device from its next message on
        (a ``Slowdown`` event); its spec says so, and ``FollowSpeeds`` drops its older looks."""
        m = self.member(name)
        spec = dataclasses.replace(m.spec, slowdown=slowdown)
        check_spec(spec)
        self.answers({name: m.actor.set_slowdown.remote(spec.slowdown)}, "setting its slowdown")
        m.spec = spec
        self.log.event(Slowdown(self.log.step, _label(m), spec.slowdown))

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.spec.name == name:
                return m
        raise HetlabError(f"no worker named {name!r} (workers: {self.names}).")

    @property
    def labels(self) -> list[str]:
        """Learner-facing worker labels: name · device precision (simulated …× slower)."""
        return [_label(m) for m in self.members]

    # --- the messages -----------------------------------------------------------------------
    def submit(self, name: str, spans: list, weights_step: int, held_s: float = 0.0) -> InFlight:
        """Send worker ``name`` the current weights and the positions ``spans``: one gradient back."""
        m, k = self.member(name), self.pieces["gradient"]
        refs = m.actor.gradient.options(num_returns=k + 1).remote(spans, *self.weights, pieces=k)
        return self._sent(m, refs, spans, weights_step, held_s)

    def submit_round(self, name: str, spans: list, weights_step: int) -> InFlight:
        """Send worker ``name`` the current weights and ``spans`` for local SGD: its H steps, their
        weights' change back (in the gradient's place)."""
        m, k = self.member(name), self.pieces["gradient"]
        refs = m.actor.local_round.options(num_returns=k + 1).remote(spans, m.local_steps, *self.weights, pieces=k)
        return self._sent(m, refs, spans, weights_step, 0.0)

    def _sent(self, m: Member, refs: list, spans: list, weights_step: int, held_s: float) -> InFlight:
        self.bytes_down += self.weights_bytes
        return InFlight(m.spec.name, m.batch_size, refs[:-1], refs[-1], weights_step, spans, time.perf_counter(),
                        held_s)

    def round(self, messages: list[InFlight], deadline: float, first: bool = False) -> Round:
        """Wait for the answers to ``messages`` until ``deadline`` (``first``: until one has come or
        gone), then fetch their gradients in one get: a ``Round`` (a worker whose gradient was
        lost with its node after it answered is among its ``lost``)."""
        waited = self._wait({m.reply: m for m in messages}, deadline, first)
        answers = [Answer(m, WorkerReply(*waited.results[m.reply]), waited.arrived[m.reply])
                   for m in messages if m.reply in waited.results]
        lost, gathered_at = [Lost(m.worker, why, m.spans) for m, why in waited.lost], time.perf_counter()
        while answers:
            try:
                got = iter(ray.get([r for a in answers for r in a.message.grad], timeout=self.timeout_s))
                grads = [join_pieces([next(got) for _ in a.message.grad]) for a in answers]
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
                ok = [_fetchable(a.message.grad) for a in answers]
                if all(ok):
                    raise HetlabError(f"could not fetch the workers' gradients ({_one_line(e)}): "
                                      f"resume from the last checkpoint.") from None
                lost = lost + [Lost(a.message.worker, "its result was lost with its node", a.message.spans)
                               for a, fine in zip(answers, ok) if not fine]
                answers = [a for a, fine in zip(answers, ok) if fine]
                continue
            self.bytes_up += len(grads) * self.gradient_bytes
            return Round(grads, answers, lost, gathered_at)
        return Round([], [], lost, gathered_at)

    def publish(self, weights: torch.Tensor) -> None:
        """Make ``weights`` what the next messages carry: in pieces inside the calls, or put
        once into Ray's object store (each worker's node pulls it from there)."""
        pieces = split_pieces(weights, self.pieces["weights"])
        self.weights = [ray.put(p) if isinstance(p, torch.Tensor) else p for p in pieces]

    def drop(self, lost: list[Lost]) -> dict:
        """Stop the lost workers and take them out (a ``WorkerLost`` event each); returns {label: why}.
        Nobody left is a HetlabError (an ``AllWorkersLost`` event). ``loop.drop_lost`` does the rest."""
        why, step, labels = {g.worker: g.why for g in lost}, self.log.step, dict(zip(self.names, self.labels))
        for name in why:
            _kill(self.member(name).actor)
        keep = [m for m in self.members if m.spec.name not in why]
        if not keep:
            self.log.event(AllWorkersLost(step))
            raise HetlabError(f"every worker was lost at step {step} ({'; '.join(why.values())}): "
                              f"reconnect the machines and resume from the last checkpoint.")
        self.members = keep              # each survivor keeps its actor, H, warm sizes ...
        gone = sorted(why, key=list(labels).index)
        for n in gone:
            self.log.event(WorkerLost(step, labels[n], why[n], tuple(self.names), time.time()))
        return {labels[n]: why[n] for n in gone}

    # --- calls that are not steps ---------------------------------------------------------
    def collect(self, refs: dict):
        """{name: answer} of calls to the workers named in ``refs`` ({name: a call's ref}) within
        the deadline, and the workers lost meanwhile: ({name: answer}, [Lost])."""
        waited = self._wait({ref: name for name, ref in refs.items()}, time.perf_counter() + self.timeout_s)
        return ({name: waited.results[ref] for name, ref in refs.items() if ref in waited.results},
                [Lost(n, why) for n, why in waited.lost])

    def answers(self, refs: dict, what: str, then: str = "run a step (it drops a lost worker) and try again") -> dict:
        """``collect``, where a worker that went away is one line, not Ray's traceback."""
        got, lost = self.collect(refs)
        if lost:
            who = "; ".join(f"{self.member(g.worker).spec.label}: {g.why}" for g in lost)
            raise HetlabError(f"a worker went away while {what} ({who}): {then}.")
        return got

    def warm_up(self, local_sgd: bool) -> None:
        """Before steps at a batch size a worker has not run yet: one untimed forward + backward
        there (``Worker.warm``), so no recorded step pays for compiling the new shape (MPS
        compiles per shape; ``hetlab.core.devices.warm_up`` says why every device does it). Sizes
        already warmed cost nothing, not even a message. A worker that fails here is left
        to the step itself, which handles a lost worker."""
        refs = {m.actor.warm.remote(m.batch_size, local_sgd): (m, m.batch_size)
                for m in self.members if m.batch_size not in m.warm_sizes}
        if not refs:
            return
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout_s)
        for ref in ready:
            try:
                ran = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            m, b = refs[ref]
            m.warm_sizes.add(b)
            self.warmups += int(ran)

    def shutdown(self) -> None:
        for m in self.members:
            _kill(m.actor)
            m.actor = None

    def _wait(self, pending: dict, deadline: float, first: bool = False) -> Waited:
        """Wait for the refs in ``pending`` ({ref: key}) until ``deadline`` (``first``: until one
        has come or gone): what came, when, and who was lost."""
        pending, results, arrived, lost = dict(pending), {}, {}, []
        while pending and not (first and (results or lost)):
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.perf_counter()))
            if not ready:
                lost += [(key, f"no answer within {self.timeout_s:.0f} s") for key in pending.values()]
                break
            now = time.perf_counter()
            for ref in ready:
                key = pending.pop(ref)
                try:
                    results[ref], arrived[ref] = ray.get(ref), now
                except ray.exceptions.RayActorError as e:
                    lost.append((key, f"{type(e).__name__}: its node or process went away"))
                except ray.exceptions.RayTaskError as e:
                    who = key.worker if isinstance(key, InFlight) else key
                    raise HetlabError(f"worker {self.member(who).spec.label} failed: {_one_line(e)}") from None
        return Waited(results, arrived, lost)


def _label(m: Member) -> str:
    """name · device precision, and what differs from what was asked (simulated, rehearsal, …)."""
    spec, info = m.spec, m.info
    prec = info.precision
    if spec.precision != prec:  # the CPU trains in fp32; a GPU may lack bf16
        prec += f" ({spec.precision} off on {info.device.split(':')[0]})"
    where = f" (rehearsal host {info.rehearsal})" if info.rehearsal else ""
    note = f" ({info.device_note})" if info.device_note else ""  # cuda:N, see worker
    return labelled(f"{spec.name} · {info.device}{note} {prec}", spec.slowdown) + where


def _kill(actor) -> None:
    if actor is not None:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _one_line(exc: BaseException) -> str:
    """The HetlabError line inside a Ray error if there is one, else the last exception line of
    its traceback (e.g. a worker's ``TypeError``, which Ray's heading pushes past 300
    characters), else its first 300 characters."""
    text = str(exc)
    if "HetlabError: " in text:
        return text.rsplit("HetlabError: ", 1)[1].splitlines()[0].strip()
    raised = [line.strip() for line in text.splitlines() if _RAISED.match(line.strip())]
    return (raised[-1] if raised else " ".join(text.split()))[:300]


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): ")


def _fetchable(refs: list) -> bool:
    """Can a gradient's pieces still be fetched (or were they lost with their node)?"""
    try:
        ray.get(refs, timeout=10)
        return True
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
        return False
