"""What travels in a parameter-server run, and what the driver keeps of it (notebook 05).

* ``WorkerReply``: what a worker sends back beside its gradient (or local-SGD delta), how the two
  travel (``answer_wire`` / ``open_answer``, ``as_refs``), and a message's spans (``spans_wire``);
* ``InFlight`` a message on its way; ``Answer`` / ``Lost`` one that came back, or a worker that did not;
* ``Round``: what one wait for answers brought; ``Update``: what the server did with the gradients;
* events (``Resplit``, ``WorkerLost``, ``Slowdown``, ``Checkpoint`` …): what happened, at a step;
* ``RunLog``: the step count, the ``StepRecord``s and the events of a run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from hetlab.ps.records import StepRecord, device_seconds


@dataclass(frozen=True)
class WorkerReply:
    """A worker's answer beside its gradient: the batch's loss, its timings, its samples."""

    loss: float
    compute_s: float      # forward + backward (local SGD: H steps), device synced
    simulated_s: float    # the sleep of a simulated slower device (hetlab.core.simulate)
    samples: int          # b_i (local SGD: H_i · b_i)

    device_s = property(lambda self: device_seconds(self), doc="compute + simulated (``records.device_seconds``).")

    def wire(self) -> tuple:
        """As sent: a plain tuple, which Ray serialises without pickle (a dataclass would be
        pickled, and unpickled on the driver: a few tenths of a millisecond a step)."""
        return (self.loss, self.compute_s, self.simulated_s, self.samples)


def answer_wire(pieces: tuple, reply: WorkerReply):
    """A worker's answer as it returns it, one Ray object per piece of its gradient
    (``hetlab.core.flat.pieces_for``), the last piece paired with the reply: a reply of its
    own would be one more object per answer, ~3 % of a small model's step."""
    *first, last = pieces
    return (*first, (last, reply.wire())) if first else (last, reply.wire())


def spans_wire(spans) -> list[int]:
    """A message's spans ``[(start, size), ...]`` as sent: ``[start, size, start, size, ...]``. Plain
    ints go through Ray's msgpack; a tuple would be pickled, and unpickled on the worker."""
    return [n for span in spans for n in span]


def open_spans(wire) -> list[tuple[int, int]]:
    """The spans back from ``spans_wire`` (spans already in pairs are kept as they are)."""
    if wire and not isinstance(wire[0], int):
        return list(wire)
    return list(zip(wire[::2], wire[1::2]))


def as_refs(refs) -> list:
    """A call's return refs as a list: with ``num_returns=1`` Ray gives the one ref itself."""
    return list(refs) if isinstance(refs, (list, tuple)) else [refs]


def open_answer(values: list) -> tuple[list, WorkerReply]:
    """(the gradient's pieces, the ``WorkerReply``) from an answer's objects, one value per
    piece, as ``ray.get`` of its refs gives them (one piece: ``[answer]``)."""
    *first, (last, reply) = values
    return [*first, last], WorkerReply(*reply)


@dataclass(frozen=True, eq=False)
class InFlight:
    """One message sent to worker ``worker``: the refs of its answer (``answer_wire``)."""

    worker: str
    batch_size: int
    answer: list          # refs of the gradient's (or delta's) pieces; the last also carries the reply
    weights_step: int     # the server's step of the weights it carries (staleness = applied − this)
    spans: list           # its positions of the shuffled stream
    sent_at: float
    held_s: float = 0.0   # async: how long the worker sat idle before this message


@dataclass(frozen=True, eq=False)
class Answer:
    message: InFlight
    reply: WorkerReply
    arrived_at: float


@dataclass(frozen=True)
class Lost:
    """A worker that did not answer (its node or process went away, or the deadline passed)."""

    worker: str
    why: str
    spans: list = field(default_factory=list)  # the positions it was given, to hand out again


@dataclass(frozen=True, eq=False)
class Round:
    """What one wait for answers brought: their gradients (in order), the answers kept, the
    workers lost (deadline, node gone, result lost with its node) and when the wait ended."""

    grads: list
    answers: list[Answer]
    lost: list[Lost]
    gathered_at: float    # perf_counter when the answers were in: the update's time starts here


@dataclass(frozen=True)
class Update:
    """One step of the server: the new weights, its version and its own time."""

    weights: torch.Tensor
    version: int
    server_s: float       # combining the gradients + the optimizer step


@dataclass(frozen=True)
class Event:
    """Something that happened to a run, at server step ``step`` (``training.events``)."""

    step: int


@dataclass(frozen=True)
class Resplit(Event):
    """The global batch was split anew, ``before`` → ``after``; ``why``: "set" (``run(batch_sizes=)``,
    ``resplit``), "measure", "follow" (``FollowSpeeds``, with the lines it saw) or "lost"."""

    before: tuple
    after: tuple
    why: str
    lines: tuple = ()   # follow: each worker's fitted StepTime, its messages included


@dataclass(frozen=True)
class WorkerLost(Event):
    """A worker did not answer and was dropped; ``survivors`` train on."""

    worker: str
    reason: str
    survivors: tuple
    time: float               # time.time() when the driver noticed


@dataclass(frozen=True)
class AllWorkersLost(Event):
    """Nobody was left to train: the run stopped."""


@dataclass(frozen=True)
class Slowdown(Event):
    """Worker ``worker`` (its label) became a simulated ``slowdown``× slower device."""

    worker: str
    slowdown: float


@dataclass(frozen=True)
class Checkpoint(Event):
    """A checkpoint was written to ``path``."""

    path: str


@dataclass(frozen=True)
class Resumed(Event):
    """This run continues the checkpoint at ``path``."""

    path: str


@dataclass
class RunLog:
    """A parameter-server run's step count, records and events, and their only writer: the loops
    add steps (``keep_*``), the pool and the training add events (``event``), a checkpoint read
    back sets where the run stands (``restore``). Everything else reads them.

    Why not one log with ``core.train.History`` and Ray Train's ``RankLog``: those keep one device's
    epochs (loss, accuracy, samples/s), taken by one process; this keeps, per step, each worker's
    share and where its time went (``StepRecord``), and what happened to the run (events)."""

    step: int = 0
    samples_seen: int = 0
    records: list[StepRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def event(self, event: Event) -> Event:
        """Add what happened to the run (a ``Resplit``, ``WorkerLost``, ``Checkpoint`` …); returns it."""
        self.events.append(event)
        return event

    def restore(self, step: int, samples_seen: int) -> None:
        """Where a resumed run stands: the step and samples of the checkpoint it continues."""
        self.step, self.samples_seen = step, samples_seen

    def keep_round(self, got: Round, update: Update, since: float) -> None:
        """The records of one synchronous step (or local-SGD round) begun at ``since``: each
        worker's round trip from then, and its wait for the last answer of the step."""
        end, last = time.perf_counter(), max(a.arrived_at for a in got.answers)
        for a in got.answers:
            self._keep(a, update, end - got.gathered_at, a.arrived_at - since, last - a.arrived_at, 0, end - since)
        self.step += 1

    def keep_update(self, answer: Answer, update: Update, since: float, gathered_at: float) -> float:
        """The record of one asynchronous update (the step since the update before, at ``since``);
        returns when it ended."""
        end, message = time.perf_counter(), answer.message
        self._keep(answer, update, end - gathered_at, answer.arrived_at - message.sent_at, message.held_s,
                   self.step - message.weights_step, end - since)
        self.step += 1
        return end

    def _keep(self, a: Answer, update: Update, update_s, round_trip, wait_s, staleness, step_s) -> None:
        """comm = the driver's round trip − the worker's compute − its simulated sleep."""
        r = a.reply
        self.records.append(StepRecord(
            step=self.step + 1, worker=a.message.worker, batch_size=a.message.batch_size,
            compute_s=r.compute_s, simulated_s=r.simulated_s, wait_s=wait_s,
            comm_s=max(0.0, round_trip - r.device_s), loss=r.loss, staleness=staleness,
            server_s=update.server_s, update_s=update_s, step_s=step_s, samples=r.samples))
        self.samples_seen += r.samples
