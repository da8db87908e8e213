"""The parameter server's loops (notebooks 05, 06, 08): a synchronous step (local SGD's round too), async
updates, and ``FollowSplit``, a callback between steps (a plain callable, ``callback(run)``).

``sync_step`` is Ray's parameter-server loop with what two unlike machines need: a batch size b_i each,
the weighted sum Σ (b_i/B)·g_i, a deadline (``gather``) and a lost worker dropped (``drop_lost``).
Notebook 05 prints it with ``gather``, ``Worker.gradient`` and ``Server.apply``: the code that runs.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import ray
import torch

from hetlab.arithmetic.balance import follow_split, split_batch
from hetlab.arithmetic.steptime import fit_rounds
from hetlab.core.simulate import device_seconds
from hetlab.core.stream import split_spans
from hetlab.errors import HetlabError, one_line
from hetlab.ps.records import Event, StepRecord, worker_steps
from hetlab.ps.specs import check_count


def sync_step(run) -> None:
    """One synchronous step: every worker gets the weights and its b_i of the next B positions of the
    shuffled stream; the server applies Σ (b_i/B)·g_i of the gradients that came by the deadline. In
    local SGD a worker takes H_i steps of b_i and answers its change instead. A worker that did not
    answer is dropped, and its positions are trained in the next step."""
    t0, local = time.perf_counter(), run.mode == "local_sgd"
    sizes = [b * (h if local else 1) for b, h in zip(run.batch_sizes, run.local_steps)]
    spans = split_spans(run.stream.take(sum(sizes)), sizes)             # b_i consecutive positions each
    calls = {name: run.actors[name].local_round.remote(mine, h, run.weights) if local
             else run.actors[name].gradient.remote(mine, run.weights)
             for name, h, mine in zip(run.names, run.local_steps, spans)}
    answers, lost = gather(run, calls, deadline=t0 + run.timeout_s)     # {name: (g_i, reply, came at)}
    if answers:
        gathered = time.perf_counter()
        grads, samples = [g for g, _, _ in answers.values()], [reply[3] for _, reply, _ in answers.values()]
        run.server.apply(grads, samples)                                 # Σ (b_i/B)·g_i, one optimizer step
        server_s = time.perf_counter() - gathered
        run.weights = run.server.weights().numpy()                       # what the next calls carry
        keep_step(run, calls, answers, t0, gathered, server_s)
    drop_lost(run, lost, dict(zip(calls, spans)))


def gather(run, calls: dict, deadline: float, first: bool = False) -> tuple[dict, dict]:
    """The answers to ``calls`` ({worker: its call's ref}) that came by ``deadline`` (``first``: the
    first one): ({worker: (gradient, reply, came at)}, {worker: why} for the others)."""
    waiting, came, late = {ref: name for name, ref in calls.items()}, {}, []
    while waiting and not (first and came):
        done, _ = ray.wait(list(waiting), timeout=max(0.0, deadline - time.perf_counter()), fetch_local=False)
        if not done:
            late = list(waiting.values())                                # the deadline passed
            break
        came[waiting.pop(done[0])] = time.perf_counter()
    values, lost = fetch(run, {name: ref for name, ref in calls.items() if name in came})
    lost |= {name: f"no answer within {run.timeout_s:.0f} s" for name in late}
    return {name: (torch.from_numpy(np.array(g)), reply, came[name]) for name, (g, reply) in values.items()}, lost


def sync_steps(run, steps: int, callbacks: list, checkpoints: bool) -> None:
    """``steps`` of ``sync_step``, the callbacks after each, then the automatic checkpoint when one is due."""
    for _ in range(steps):
        sync_step(run)
        for callback in callbacks:
            callback(run)
        if checkpoints and run.checkpoint_due():
            run.auto_checkpoint()


def async_updates(run, steps: int, callbacks: list, checkpoints: bool) -> None:
    """``steps`` asynchronous updates (notebook 05, section 6): each gradient is applied alone as it
    arrives, scaled by b_i / mean b. A worker waits while its next gradient could come more than
    ``max_staleness`` updates late. A due checkpoint waits until nothing is in flight, so its server
    state and data cursor describe the same updates (notebook 08)."""
    end, flying, resting, since = run.step + steps, {}, False, time.perf_counter()
    idle = dict.fromkeys(run.names, since)                               # worker → idle since
    while run.step < end:
        if resting and not flying:
            run.auto_checkpoint()                                        # may drop a worker gone meanwhile
            resting, idle = False, {name: idle[name] for name in run.names}
        if not resting:
            send(run, flying, idle, end)
        answers, lost = gather(run, {n: f["ref"] for n, f in flying.items()}, time.perf_counter() + run.timeout_s,
                               first=True)
        done = {name: flying.pop(name) for name in [*answers, *lost]}
        drop_lost(run, lost, {name: done[name]["spans"] for name in lost})
        for name, (grad, reply, came) in answers.items():
            sent, gathered = done[name], time.perf_counter()
            run.server.step(async_scale(sent["batch_size"], run.batch_sizes) * grad.float())
            server_s = time.perf_counter() - gathered
            run.weights = run.server.weights().numpy()
            now = time.perf_counter()
            keep(run, name, reply, sent["batch_size"], came - sent["at"], wait_s=sent["held_s"],
                 staleness=run.step - sent["weights_step"], server_s=server_s, update_s=now - gathered,
                 step_s=now - since)
            since = idle[name] = now
            run.step += 1
            run.bytes_to_server += run.gradient_bytes
            for callback in callbacks:
                callback(run)
            resting = resting or (checkpoints and run.checkpoint_due())
    if resting:
        run.auto_checkpoint()


def send(run, flying: dict, idle: dict, end: int) -> None:
    """Calls to idle workers, longest idle first, while the staleness bound lets one more start and
    updates are still wanted (async)."""
    for name in sorted(idle, key=idle.get):
        versions = [f["weights_step"] for f in flying.values()]
        if run.step + len(versions) >= end or not staleness_allows(run.step, versions, run.options["max_staleness"]):
            return
        b, now = run.batch_sizes[run.index(name)], time.perf_counter()
        spans = run.stream.take(b)
        flying[name] = {"ref": run.actors[name].gradient.remote(spans, run.weights), "spans": spans, "batch_size": b,
                        "weights_step": run.step, "at": now, "held_s": now - idle.pop(name)}
        run.bytes_to_workers += run.weights_bytes


def keep_step(run, calls: dict, answers: dict, since: float, gathered: float, server_s: float) -> None:
    """The records of one synchronous step begun at ``since`` (each worker's round trip and its wait
    for the step's last answer); the step and the bytes counted."""
    end, last = time.perf_counter(), max(came for _, _, came in answers.values())
    sizes = dict(zip(run.names, run.batch_sizes))
    for name, (_, reply, came) in answers.items():
        keep(run, name, reply, sizes[name], came - since, wait_s=last - came, server_s=server_s,
             update_s=end - gathered, step_s=end - since)
    run.step += 1
    run.bytes_to_workers += len(calls) * run.weights_bytes
    run.bytes_to_server += len(answers) * run.gradient_bytes


def keep(run, name: str, reply: tuple, batch_size: int, round_trip: float, **seconds) -> None:
    """One ``StepRecord``: comm is the driver's round trip − the worker's compute − its simulated sleep."""
    loss, compute_s, simulated_s, samples = reply
    run.records.append(StepRecord(step=run.step + 1, worker=name, batch_size=batch_size, compute_s=compute_s,
                                  simulated_s=simulated_s, loss=loss, samples=samples,
                                  comm_s=max(0.0, round_trip - device_seconds(compute_s, simulated_s)), **seconds))
    run.samples_seen += samples


def fetch(run, calls: dict) -> tuple[dict, dict]:
    """The value of each worker's call ({worker: its ref}), and {worker: why} for those whose values
    went away with their node or process. An error inside a worker's own code is a HetlabError naming it."""
    got, failed = {}, {}
    for name, ref in calls.items():
        try:
            got[name] = ray.get(ref, timeout=run.timeout_s)
        except ray.exceptions.RayActorError as e:
            failed[name] = f"{type(e).__name__}: its node or process went away"
        except ray.exceptions.RayTaskError as e:
            raise HetlabError(f"worker {run.workers[run.index(name)].label} failed: {one_line(e)}") from None
        except ray.exceptions.GetTimeoutError:
            failed[name] = f"its result did not come within {run.timeout_s:.0f} s of its call's end"
        except ray.exceptions.RayError:
            failed[name] = "its result was lost with its node"
    return got, failed


def collect(run, refs: dict) -> tuple[dict, dict]:
    """{worker: answer} of one call to each worker in ``refs`` ({worker: its call's ref}) within the
    deadline, and {worker: why} for those lost meanwhile: the calls that are not steps."""
    ready, late = ray.wait(list(refs.values()), num_returns=len(refs), timeout=run.timeout_s, fetch_local=False)
    got, lost = fetch(run, {name: ref for name, ref in refs.items() if ref in ready})
    return got, lost | {name: f"no answer within {run.timeout_s:.0f} s" for name, ref in refs.items() if ref in late}


def drop_lost(run, lost: dict, spans: dict) -> None:
    """Lost workers ({worker: why}) out of the run: their positions (``spans``) back to the stream,
    trained next step; their actors stopped; a "lost" ``Event`` and a line each; the global batch
    split over the rest. Nobody left is a HetlabError (an "all lost" ``Event``)."""
    if not lost:
        return
    step, global_batch, labels = run.step, sum(run.batch_sizes), dict(zip(run.names, run.labels))
    for name in lost:
        run.stream.give_back(spans.get(name, []))
        run.kill_worker(name)
        run.actors.pop(name)
    live = [i for i, name in enumerate(run.names) if name not in lost]
    run.workers, run.batch_sizes, run.local_steps = ([xs[i] for i in live] for xs in
                                                      (run.workers, run.batch_sizes, run.local_steps))
    if not run.workers:
        run.events.append(Event(step, "all lost"))
        raise HetlabError(f"every worker was lost at step {step} ({'; '.join(lost.values())}): "
                          f"reconnect the machines and resume from the last checkpoint.")
    gone = [name for name in labels if name in lost]
    for name in gone:
        run.events.append(Event(step, "lost", worker=labels[name], reason=lost[name], survivors=tuple(run.names),
                                time=time.time()))
    sizes = split_batch(max(global_batch, len(run.workers)), run.batch_sizes)
    run.resplit(sizes, "lost")
    for name in gone:
        print(f"⚠ lost worker {labels[name]} at step {step} ({lost[name]}); training goes on with "
              f"{', '.join(run.labels)}; batch sizes rebalanced to {sizes} (global batch {sum(sizes)}).")


def async_scale(batch_size: int, batch_sizes: Sequence[int]) -> float:
    """Scale of one gradient applied alone in async mode: b_i / mean(b) (1 for equal batches)."""
    return batch_size * len(batch_sizes) / float(sum(batch_sizes))


def staleness_allows(version: int, reads_in_flight: Sequence[int], max_staleness: int) -> bool:
    """May one more worker start now with no gradient more than ``max_staleness`` updates late? One in
    flight read version r and can be overtaken by all others in flight: its worst case is
    (version − r) + (in flight − 1). A fast worker waits; no gradient is thrown away (notebook 05)."""
    n_after = len(reads_in_flight) + 1
    if n_after - 1 > max_staleness:
        return False
    return all(version - r + n_after - 1 <= max_staleness for r in reads_in_flight)


class FollowSplit:
    """Every ``every`` steps, re-split the global batch for the speeds of those steps when that gains
    more than 5 % (``balance.follow_split``; notebook 06). A worker's last two looks give its step's
    fixed and per-sample parts (``steptime.fit_rounds``). ``rule(batch_sizes, lines)`` gives the split."""

    def __init__(self, every: int, rule=follow_split):
        self.every, self.rule = check_count("FollowSplit's every", every, 1), rule
        self.looks: dict = {}   # worker → (its slowdown, batch per step, busy s per step) at its last look

    def __call__(self, run) -> None:
        if (run.step - run.first_step) % self.every == 0:
            self.follow(run, [r for r in run.records if r.step > run.step - self.every])

    def follow(self, run, records) -> None:
        """Re-split for the speeds in ``records`` if that gains enough; a look from before the worker's
        simulated slowdown changed is dropped."""
        lines = []
        for spec in run.workers:
            seen = worker_steps(r for r in records if r.worker == spec.name)
            if seen.device_samples_per_s <= 0:
                return  # a worker has no record here (one was just lost): look again next time
            look, last = (seen.batch, seen.batch / seen.device_samples_per_s), self.looks.get(spec.name)
            points = [last[1:], look] if last and last[0] == spec.slowdown else [look]
            line = fit_rounds(*zip(*points))
            self.looks[spec.name] = (spec.slowdown, *look)
            lines.append(line.plus(seen.comm_s, f"{spec.name}, its messages included"))
        if run.resplit(self.rule(run.batch_sizes, lines), "follow", lines=tuple(lines)) is not None:
            run.warm_up()   # a timed step follows: MPS compiles per shape
