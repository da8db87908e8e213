"""The workers of a parameter-server run and the messages to them (notebook 05).

A ``WorkerPool`` holds one ``Member`` per live worker and, for ``hetlab.ps.loop``, can ``submit`` a
message (stream positions + weights; ``submit_round``: local SGD's H steps), wait a ``round`` of answers
and their gradients within a deadline (never an unbounded ``ray.get``), ``drop`` a lost worker,
``publish`` new weights (``flat.pieces_for``) and ``resplit`` the global batch: the one writer of
each member (its split, H and slowdown), which logs what changed as events in the run's ``RunLog``.
"""
from __future__ import annotations

import dataclasses
import time

import ray
import torch

from hetlab.errors import HetlabError, one_line
from hetlab.core.flat import PIECE_BYTES, join_pieces, pieces_for, split_pieces
from hetlab.ps.messages import (AllWorkersLost, Answer, InFlight, Lost, Resplit, Round, RunLog, Slowdown,
                                WorkerLost, as_refs, open_answer, spans_wire)
from hetlab.ps.options import Options, check_local_steps
from hetlab.ps.specs import WorkerInfo, WorkerSpec, check_batch_sizes, check_spec
from hetlab.core.simulate import labelled
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN

REFETCH_S = 10.0   # after one get for a whole round failed: how long each worker's answer gets alone


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


class WorkerPool:
    """The live workers: submit, a round of answers within a deadline, drop the lost, resplit.
    ``log``: the run's ``RunLog``, where its events go."""

    def __init__(self, members: list[Member], options: Options, n_params: int, timeout_s: float, log: RunLog):
        self.members, self.timeout_s, self.log = members, timeout_s, log
        self.weights_bytes = BYTES_PER_VALUE[WEIGHTS_DOWN] * n_params       # one message down
        self.gradient_bytes = BYTES_PER_VALUE[options.transfer] * n_params  # one message up
        self.pieces = {"weights": pieces_for(self.weights_bytes), "gradient": pieces_for(self.gradient_bytes)}
        # an answer in pieces comes inside its call's reply: when the call has ended, it is here
        self.inline = self.gradient_bytes <= self.pieces["gradient"] * PIECE_BYTES
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
        refs = m.actor.gradient.options(num_returns=k).remote(spans_wire(spans), *self.weights)
        return self._sent(m, refs, spans, weights_step, held_s)

    def submit_round(self, name: str, spans: list, weights_step: int) -> InFlight:
        """Send worker ``name`` the current weights and ``spans`` for local SGD: its H steps, their
        weights' change back (in the gradient's place)."""
        m, k = self.member(name), self.pieces["gradient"]
        refs = m.actor.local_round.options(num_returns=k).remote(spans_wire(spans), m.local_steps, *self.weights)
        return self._sent(m, refs, spans, weights_step, 0.0)

    def _sent(self, m: Member, refs, spans: list, weights_step: int, held_s: float) -> InFlight:
        self.bytes_down += self.weights_bytes
        return InFlight(m.spec.name, m.batch_size, as_refs(refs), weights_step, spans, time.perf_counter(), held_s)

    def round(self, messages: list[InFlight], deadline: float, first: bool = False) -> Round:
        """Wait for the answers to ``messages`` until ``deadline`` (``first``: until one has come),
        then fetch them all in one get: a ``Round`` (a worker whose gradient was lost with its
        node after it answered is among its ``lost``). Answers that come inside their calls
        (``inline``) are waited for one by one until one is left: the get waits for that last
        one, and its return is that answer's arrival (one Ray call fewer a step)."""
        arrived, late, left = self._wait([m.answer[-1] for m in messages], deadline, first,
                                         leave=int(self.inline and not first))
        got = self._last_by_get(messages, deadline) if left else None
        if got is None and left:                                      # it failed: as without it
            more, late, _ = self._wait(left, deadline)
            arrived.update(more)
        elif left:
            arrived[left[0]] = time.perf_counter()
        gathered_at, came = time.perf_counter(), [m for m in messages if m.answer[-1] in arrived]
        got, failed = (got, {}) if got is not None else self._fetch({m.worker: m.answer for m in came})
        lost = [Lost(m.worker, f"no answer within {self.timeout_s:.0f} s", m.spans)
                for m in messages if m.answer[-1] in late]
        lost += [Lost(m.worker, failed[m.worker], m.spans) for m in came if m.worker in failed]
        answers, grads = [], []
        for m in came:
            if m.worker in got:
                pieces, reply = open_answer(got[m.worker])
                answers.append(Answer(m, reply, arrived[m.answer[-1]]))
                grads.append(join_pieces(pieces))
        self.bytes_up += len(grads) * self.gradient_bytes
        return Round(grads, answers, lost, gathered_at)

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
        arrived, late, _ = self._wait(list(refs.values()), time.perf_counter() + self.timeout_s)
        got, failed = self._fetch({name: [ref] for name, ref in refs.items() if ref in arrived})
        lost = [Lost(n, f"no answer within {self.timeout_s:.0f} s") for n, ref in refs.items() if ref in late]
        return {name: values[0] for name, values in got.items()}, lost + [Lost(n, why) for n, why in failed.items()]

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

    def _wait(self, refs: list, deadline: float, first: bool = False, leave: int = 0) -> tuple[dict, list, list]:
        """Wait for ``refs`` until ``deadline`` (``first``: until one has come; ``leave``: until
        that many are still out): ({ref: when it came}, the refs still out at the deadline, the
        refs left out). A ref has come when its call has ended, well or not; its value may
        still be on the worker's node (``_fetch`` gets it)."""
        pending, arrived = list(refs), {}
        while len(pending) > leave and not (first and arrived):
            ready, pending = ray.wait(pending, num_returns=1, fetch_local=False,
                                      timeout=max(0.0, deadline - time.perf_counter()))
            if not ready:
                return arrived, pending, []
            now = time.perf_counter()
            arrived.update(dict.fromkeys(ready, now))
        return arrived, [], pending

    def _last_by_get(self, messages: list[InFlight], deadline: float) -> dict | None:
        """Every answer in one get within the deadline, the last one still out when it starts:
        {name: [value, ...]}, or None when it did not come in time or a value is gone (``round``
        then waits and fetches as it does without it, to say whose)."""
        try:
            values = iter(ray.get([r for m in messages for r in m.answer],
                                  timeout=max(0.0, deadline - time.perf_counter())))
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            return None
        return {m.worker: [next(values) for _ in m.answer] for m in messages}

    def _fetch(self, refs: dict) -> tuple[dict, dict]:
        """The values of each worker's refs ({name: [ref, ...]}) in one ``ray.get``: ({name: [value,
        ...]}, {name: why} for those whose values are gone with their node or process). A
        worker's own exception is a HetlabError."""
        try:
            values = iter(ray.get([r for rs in refs.values() for r in rs], timeout=self.timeout_s))
            return {name: [next(values) for _ in rs] for name, rs in refs.items()}, {}
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            pass                                                      # one by one: whose is it?
        got, failed = {}, {}
        for name, rs in refs.items():
            try:
                got[name] = ray.get(rs, timeout=REFETCH_S)
            except ray.exceptions.RayActorError as e:
                failed[name] = f"{type(e).__name__}: its node or process went away"
            except ray.exceptions.RayTaskError as e:
                raise HetlabError(f"worker {self.member(name).spec.label} failed: {one_line(e)}") from None
            except ray.exceptions.GetTimeoutError:
                failed[name] = f"its result did not come within {self.timeout_s + REFETCH_S:.0f} s of its call's end"
            except ray.exceptions.RayError:
                failed[name] = "its result was lost with its node"
        return got, failed


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
