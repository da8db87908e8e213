"""The parameter server's loops: a synchronous step, local SGD's round, async updates (notebook 05).

``sync_step`` is the body of Ray's parameter-server loop (``gradients = [w.compute_gradients
.remote(weights) ...]; weights = ps.apply_gradients.remote(*gradients)``) with what two unlike
machines need: a batch size b_i each, the weighted sum Σ (b_i/B)·g_i, a deadline, a lost worker dropped.
"""
from __future__ import annotations

import time

from hetlab.data import Stream, split_spans
from hetlab.ps.hooks import Hooks
from hetlab.ps.messages import History, InFlight
from hetlab.ps.pool import WorkerPool
from hetlab.ps.server import Server
from hetlab.ps.specs import async_scale, combine_coefficients, staleness_allows


def sync_step(pool: WorkerPool, server: Server, stream: Stream, history: History) -> None:
    """One synchronous step, defined in notebook 05: every worker gets the weights and its b_i
    of the next B positions; the server applies Σ (b_i/B)·g_i of the gradients that came by the
    deadline. A worker that did not is dropped, its positions trained in the next step."""
    t0 = time.perf_counter()
    sizes = pool.message_sizes()
    shares = split_spans(stream.take(sum(sizes)), sizes)            # B consecutive positions, b_i each
    sent = [pool.submit(name, share, read=history.step) for name, share in zip(pool.names, shares)]
    answers, lost = pool.gather(sent, deadline=t0 + pool.timeout_s)
    t_update = time.perf_counter()
    grads, answers, lost = pool.fetch(answers, lost)
    if answers:
        b = [a.reply.samples for a in answers]
        update = server.apply(combine_coefficients(b), grads)       # Σ (b_i/B)·g_i, one optimizer step
        pool.publish(update.weights)                                # what the next messages carry
        history.keep_round(answers, update, since=t0, update_s=time.perf_counter() - t_update)
    for gone in lost:
        stream.give_back(gone.spans)
    pool.drop(lost, history)                                        # rebalance; nobody left: raises


def local_sgd_round(pool: WorkerPool, server: Server, stream: Stream, history: History) -> None:
    """One round of local SGD (notebook 08): each worker takes its H_i Adam steps from the same
    weights on its H_i·b_i of the next positions and sends back how far its weights moved; the
    server averages those changes weighted by samples and takes its outer SGD step. That is
    ``sync_step`` with a pool whose messages are such rounds (``WorkerPool.local_sgd``) and a
    server whose optimizer is the outer one (``Server(mode="local_sgd")``)."""
    assert pool.local_sgd, "a local-SGD round needs a pool of mode 'local_sgd'"
    sync_step(pool, server, stream, history)


def sync_steps(pool: WorkerPool, server: Server, stream: Stream, history: History,
               steps: int, hooks: Hooks) -> None:
    """``steps`` synchronous steps (local SGD: rounds), the hooks after each."""
    step = local_sgd_round if pool.local_sgd else sync_step
    for _ in range(steps):
        step(pool, server, stream, history)
        hooks.after_step()
        if hooks.waiting:
            hooks.at_rest()


def async_updates(pool: WorkerPool, server: Server, stream: Stream, history: History,
                  steps: int, max_staleness: int, hooks: Hooks) -> None:
    """``steps`` asynchronous updates (notebook 05, section 6): each gradient is applied alone as
    it arrives, scaled by b_i / mean b. A worker waits while its next gradient could come more
    than ``max_staleness`` updates late (no work is thrown away), and everyone waits while a
    hook wants the run at rest (a checkpoint): then nothing is in flight."""
    end, in_flight, since = history.step + steps, [], time.perf_counter()
    idle = dict.fromkeys(pool.names, since)                          # worker → idle since
    while history.step < end:
        if hooks.waiting and not in_flight:
            hooks.at_rest()                                          # may drop a worker gone meanwhile
            idle = {name: idle[name] for name in pool.names}
        if not hooks.waiting:
            in_flight += _send(pool, stream, history, idle, in_flight, end, max_staleness)
        answers, lost = pool.gather(in_flight, time.perf_counter() + pool.timeout_s, first=True)
        t_update = time.perf_counter()
        grads, answers, lost = pool.fetch(answers, lost)             # at most one answer
        done = {a.message.worker for a in answers} | {gone.worker for gone in lost}
        in_flight = [m for m in in_flight if m.worker not in done]
        for gone in lost:
            stream.give_back(gone.spans)
        pool.drop(lost, history)
        for a, grad in zip(answers, grads):
            update = server.apply([async_scale(a.message.batch_size, pool.batch_sizes)], [grad])
            pool.publish(update.weights)
            since = idle[a.message.worker] = history.keep_update(a, update, since, time.perf_counter() - t_update)
            hooks.after_step()
    if hooks.waiting:
        hooks.at_rest()


def _send(pool: WorkerPool, stream: Stream, history: History, idle: dict, in_flight: list,
          end: int, max_staleness: int) -> list[InFlight]:
    """Messages to idle workers, longest idle first, while the staleness bound lets one more
    start and updates are still wanted."""
    sent: list[InFlight] = []
    for name in sorted(idle, key=idle.get):
        reads = [m.read for m in in_flight + sent]
        if history.step + len(reads) >= end or not staleness_allows(history.step, reads, max_staleness):
            break
        now = time.perf_counter()
        spans = stream.take(pool.member(name).batch_size)
        sent.append(pool.submit(name, spans, read=history.step, held_s=now - idle.pop(name)))
    return sent
