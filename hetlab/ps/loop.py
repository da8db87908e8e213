"""The parameter server's loops: a synchronous step, local SGD's round, async updates (notebook 05).

``sync_step`` is the body of Ray's parameter-server loop (``gradients = [w.compute_gradients
.remote(weights) ...]; weights = ps.apply_gradients.remote(*gradients)``) with what two unlike
machines need: a batch size b_i each, the weighted sum Σ (b_i/B)·g_i, a deadline, a lost worker dropped.
"""
from __future__ import annotations

import time

from hetlab.core.data import Stream, split_spans
from hetlab.ps.hooks import Hooks
from hetlab.ps.messages import InFlight, RunLog
from hetlab.ps.pool import WorkerPool
from hetlab.ps.server import Server
from hetlab.ps.specs import async_scale, combine_coefficients, staleness_allows


def sync_step(pool: WorkerPool, server: Server, stream: Stream, log: RunLog) -> None:
    """One synchronous step, defined in notebook 05: every worker gets the weights and its b_i
    of the next B positions; the server applies Σ (b_i/B)·g_i of the gradients that came by the
    deadline. A worker that did not is dropped, its positions trained in the next step. Local
    SGD's round is this step, with a pool whose messages are rounds of H_i steps and a server
    whose optimizer is the outer one (notebook 08)."""
    t0, sizes = time.perf_counter(), pool.message_sizes()
    shares = split_spans(stream.take(sum(sizes)), sizes)                 # B consecutive positions, b_i each
    got = pool.round([pool.submit(name, share, read=log.step) for name, share in zip(pool.names, shares)],
                     deadline=t0 + pool.timeout_s)
    if got.answers:
        update = server.apply(combine_coefficients([a.reply.samples for a in got.answers]), got.grads)
        pool.publish(update.weights)                                     # what the next messages carry
        log.keep_round(got, update, since=t0)
    pool.drop(got.lost, stream)                                          # rebalance; nobody left: raises


def sync_steps(pool: WorkerPool, server: Server, stream: Stream, log: RunLog, steps: int, hooks: Hooks) -> None:
    """``steps`` synchronous steps (local SGD: rounds), the hooks after each."""
    for _ in range(steps):
        sync_step(pool, server, stream, log)
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
        got = pool.round(in_flight, time.perf_counter() + pool.timeout_s, first=True)   # at most one answer
        done = {a.message.worker for a in got.answers} | {gone.worker for gone in got.lost}
        in_flight = [m for m in in_flight if m.worker not in done]
        pool.drop(got.lost, stream)
        for a, grad in zip(got.answers, got.grads):
            update = server.apply([async_scale(a.message.batch_size, pool.batch_sizes)], [grad])
            pool.publish(update.weights)
            since = idle[a.message.worker] = log.keep_update(a, update, since, got.gathered_at)
            hooks.after_step()
    if hooks.waiting:
        hooks.at_rest()


def _send(pool: WorkerPool, stream: Stream, log: RunLog, idle: dict, in_flight: list,
          end: int, max_staleness: int) -> list[InFlight]:
    """Messages to idle workers, longest idle first, while the staleness bound lets one more
    start and updates are still wanted."""
    sent: list[InFlight] = []
    for name in sorted(idle, key=idle.get):
        reads = [m.read for m in in_flight + sent]
        if log.step + len(reads) >= end or not staleness_allows(log.step, reads, max_staleness):
            break
        now = time.perf_counter()
        spans = stream.take(pool.member(name).batch_size)
        sent.append(pool.submit(name, spans, read=log.step, held_s=now - idle.pop(name)))
    return sent
