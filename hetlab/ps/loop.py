"""The parameter server's loops: a synchronous step, local SGD's round, async updates (notebook 05).

``sync_step`` is the body of Ray's parameter-server loop (``gradients = [w.compute_gradients
.remote(weights) ...]; weights = ps.apply_gradients.remote(*gradients)``) with what two unlike
machines need: a batch size b_i each, the weighted sum Σ (b_i/B)·g_i, a deadline, a lost worker dropped.
``local_sgd_round`` is its sibling (notebook 08): H_i local steps per worker, then one outer step.
"""
from __future__ import annotations

import time

from hetlab.arithmetic.balance import split_batch
from hetlab.core.stream import Stream, split_spans
from hetlab.ps.hooks import Hooks
from hetlab.ps.messages import InFlight, Lost, Round, RunLog
from hetlab.ps.pool import WorkerPool
from hetlab.ps.server import Server
from hetlab.ps.rules import async_scale, combine_coefficients, staleness_allows


def sync_step(pool: WorkerPool, server: Server, stream: Stream, log: RunLog) -> None:
    """One synchronous step, defined in notebook 05: every worker gets the weights and its b_i
    of the next B positions; the server applies Σ (b_i/B)·g_i of the gradients that came by the
    deadline. A worker that did not is dropped, its positions trained in the next step."""
    t0, sizes = time.perf_counter(), pool.batch_sizes
    shares = split_spans(stream.take(sum(sizes)), sizes)                 # B consecutive positions, b_i each
    messages = [pool.submit(name, share, weights_step=log.step) for name, share in zip(pool.names, shares)]
    close_round(pool, server, stream, log, pool.round(messages, deadline=t0 + pool.timeout_s), t0)


def local_sgd_round(pool: WorkerPool, server: Server, stream: Stream, log: RunLog) -> None:
    """One round of local SGD (notebook 08): every worker takes H_i steps of b_i from the same
    weights and sends their change; the server's outer optimizer applies Σ (H_i·b_i / Σ) Δ_i
    of the changes that came by the deadline. One round is one server step of the run."""
    t0, sizes = time.perf_counter(), [h * b for h, b in zip(pool.local_steps, pool.batch_sizes)]
    shares = split_spans(stream.take(sum(sizes)), sizes)                 # H_i·b_i positions each
    messages = [pool.submit_round(name, share, weights_step=log.step) for name, share in zip(pool.names, shares)]
    close_round(pool, server, stream, log, pool.round(messages, deadline=t0 + pool.timeout_s), t0)


def close_round(pool: WorkerPool, server: Server, stream: Stream, log: RunLog, back: Round, since: float) -> None:
    """The end of a synchronous step or a local-SGD round begun at ``since``: the server applies
    Σ (samples_i / Σ) of what came back by the deadline, the new weights go out with the next
    messages, the round's records are kept, and the workers that did not answer are dropped."""
    if back.answers:
        update = server.apply(combine_coefficients([a.reply.samples for a in back.answers]), back.grads)
        pool.publish(update.weights)                                     # what the next messages carry
        log.keep_round(back, update, since=since)
    drop_lost(pool, stream, back.lost)                                   # rebalance; nobody left: raises


def drop_lost(pool: WorkerPool, stream: Stream, lost: list[Lost]) -> None:
    """Lost workers out of the run: their positions back to ``stream`` (trained next step), their
    actors stopped, the global batch split over the rest, a line for the learner. Nobody left
    is a HetlabError (``pool.drop``)."""
    if not lost:
        return
    global_batch, step = sum(pool.batch_sizes), pool.log.step
    for gone in lost:
        stream.give_back(gone.spans)
    gone = pool.drop(lost)                                               # {label: why}; WorkerLost events
    sizes = split_batch(max(global_batch, len(pool.names)), pool.batch_sizes)
    pool.resplit(sizes, "lost")
    for label, why in gone.items():
        print(f"⚠ lost worker {label} at step {step} ({why}); training goes on with "
              f"{', '.join(pool.labels)}; batch sizes rebalanced to {sizes} (global batch {sum(sizes)}).")


def sync_steps(pool: WorkerPool, server: Server, stream: Stream, log: RunLog, steps: int, hooks: Hooks,
               step=sync_step) -> None:
    """``steps`` of ``step`` (``sync_step``, or ``local_sgd_round``: a round), the hooks after each."""
    for _ in range(steps):
        step(pool, server, stream, log)
        hooks.after_step()
        if hooks.waiting:
            hooks.at_rest()


def async_updates(pool: WorkerPool, server: Server, stream: Stream, log: RunLog,
                  steps: int, max_staleness: int, hooks: Hooks) -> None:
    """``steps`` asynchronous updates (notebook 05, section 6): each gradient is applied alone as
    it arrives, scaled by b_i / mean b. A worker waits while its next gradient could come more
    than ``max_staleness`` updates late (no work is thrown away), and everyone waits while a
    hook wants the run at rest (a checkpoint): then nothing is in flight."""
    end, in_flight, since = log.step + steps, [], time.perf_counter()
    idle = dict.fromkeys(pool.names, since)                          # worker → idle since
    while log.step < end:
        if hooks.waiting and not in_flight:
            hooks.at_rest()                                          # may drop a worker gone meanwhile
            idle = {name: idle[name] for name in pool.names}
        if not hooks.waiting:
            in_flight += _send(pool, stream, log, idle, in_flight, end, max_staleness)
        back = pool.round(in_flight, time.perf_counter() + pool.timeout_s, first=True)   # at most one answer
        done = {a.message.worker for a in back.answers} | {gone.worker for gone in back.lost}
        in_flight = [m for m in in_flight if m.worker not in done]
        drop_lost(pool, stream, back.lost)
        for a, grad in zip(back.answers, back.grads):
            update = server.apply([async_scale(a.message.batch_size, pool.batch_sizes)], [grad])
            pool.publish(update.weights)
            since = idle[a.message.worker] = log.keep_update(a, update, since, back.gathered_at)
            hooks.after_step()
    if hooks.waiting:
        hooks.at_rest()


def _send(pool: WorkerPool, stream: Stream, log: RunLog, idle: dict, in_flight: list,
          end: int, max_staleness: int) -> list[InFlight]:
    """Messages to idle workers, longest idle first, while the staleness bound lets one more
    start and updates are still wanted."""
    sent: list[InFlight] = []
    for name in sorted(idle, key=idle.get):
        versions = [m.weights_step for m in in_flight + sent]
        if log.step + len(versions) >= end or not staleness_allows(log.step, versions, max_staleness):
            break
        now = time.perf_counter()
        spans = stream.take(pool.member(name).batch_size)
        sent.append(pool.submit(name, spans, weights_step=log.step, held_s=now - idle.pop(name)))
    return sent
