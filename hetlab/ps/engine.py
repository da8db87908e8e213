"""How one parameter-server step is driven: sync rounds, async updates, lost workers (notebooks 05, 08).

Functions over a running ``ParameterServerTraining`` ``t``: they submit work to its
worker actors, wait with ``ray.wait`` (never an unbounded ``ray.get``), apply results
on its server, write its ``StepRecord``s and, when a worker's node disappears, drop
that worker, rebalance the global batch over the rest with ``hetlab.balance.split_batch``
and tell the learner (a printed line and an entry in ``t.events``).

Which samples: every message carries its positions of the shuffled stream, taken from
the training's one cursor ``t.stream`` (``hetlab.data.Stream``). A sync step takes the
next B = Σb_i positions and gives worker i its consecutive b_i of them (one big batch,
drawn uniformly); an async message takes the next b_i. Positions of a message that is
never applied (its worker was lost) are given back, and the next message trains them.
"""
from __future__ import annotations

import time

import ray

from hetlab.balance import split_batch
from hetlab.data import split_spans
from hetlab.errors import HetlabError
from hetlab.ps.specs import StepRecord, async_scale, combine_coefficients, staleness_allows
from hetlab.ps.worker import WIRE_DTYPES


def submit(t, i: int, spans: list):
    """Start worker i's next message on the positions ``spans``; returns (gradient/delta ref, meta ref)."""
    actor = t.members[i].actor
    t.bytes_to_workers += t.n_params * 4
    if t.mode == "local_sgd":
        return actor.local_round.remote(t._weights, spans, t.steps_per_message(i))
    return actor.gradient.remote(t._weights, spans)


def sync_round(t) -> None:
    """One synchronous step (or one local-SGD round) over every live worker."""
    t0 = time.perf_counter()
    sizes = [t.steps_per_message(i) * m.batch_size for i, m in enumerate(t.members)]
    shares = split_spans(t.stream.take(sum(sizes)), sizes)
    pending = {}
    for i in range(len(t.members)):
        grad, meta = submit(t, i, shares[i])
        pending[meta] = (i, grad)
    results, arrived, lost = {}, {}, []
    deadline = t0 + t.worker_timeout_s
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1,
                            timeout=max(0.0, deadline - time.perf_counter()))
        if not ready:
            lost += [(i, f"no answer within {t.worker_timeout_s:.0f} s") for i, _ in pending.values()]
            break
        now = time.perf_counter()
        for ref in ready:
            i, grad = pending.pop(ref)
            try:
                results[i], arrived[i] = (get_result(t, ref, i), grad), now
            except _WorkerGone as gone:
                lost.append((i, str(gone)))
    survivors = sorted(results)
    if survivors:
        server_meta, survivors = apply_update(
            t, survivors, [results[i][1] for i in survivors], lost,
            lambda owners: combine_coefficients([results[o][0]["samples"] for o in owners]))
    t.stream.give_back([span for i in {i for i, _ in lost} for span in shares[i]])
    if not survivors:
        lose(t, lost)  # raises: nobody left
    t_end, last = time.perf_counter(), max(arrived[i] for i in survivors)
    for i in survivors:
        record(t, i, results[i][0], arrived[i] - t0, last - arrived[i], 0,
               server_meta["server_s"], t_end - t0)
    t.step += 1
    if lost:
        lose(t, lost)


def run_async(t, steps: int, bar) -> None:
    """Apply each gradient as it arrives; a worker waits while the staleness bound says so.

    A checkpoint falls due after an update: new messages wait until those in flight are
    applied, then it is saved. So nothing is ever in flight in a checkpoint: its server
    state and its cursor (``t.stream``) describe the same updates, and resuming it
    continues exactly (notebook 08).
    """
    idle = {m.spec.name: time.perf_counter() for m in t.members}  # name → idle since
    in_flight: dict = {}  # meta ref → (name, grad ref, version read, t_submit, held_s, spans)
    applied, t_prev, due = 0, time.perf_counter(), False
    while applied < steps:
        if due and not in_flight:
            t.save_due_checkpoint()
            due = False
        for name in sorted(idle, key=idle.get):
            reads = [v[2] for v in in_flight.values()]
            if due or applied + len(in_flight) >= steps or not staleness_allows(t.step, reads, t.max_staleness):
                break
            now, i = time.perf_counter(), t.index_of(name)
            spans = t.stream.take(t.members[i].batch_size)
            grad, meta = submit(t, i, spans)
            in_flight[meta] = (name, grad, t.step, now, now - idle.pop(name), spans)
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=t.worker_timeout_s)
        if not ready:
            for v in in_flight.values():
                t.stream.give_back(v[5])
            lose(t, [(t.index_of(v[0]), f"no answer within {t.worker_timeout_s:.0f} s")
                     for v in in_flight.values()])
            in_flight.clear()
            continue
        name, grad, read, t_sub, held, spans = in_flight.pop(ready[0])
        t_arr, i = time.perf_counter(), t.index_of(name)
        try:
            meta = get_result(t, ready[0], i)
        except _WorkerGone as gone:
            t.stream.give_back(spans)
            lose(t, [(i, str(gone))])
            continue
        scale = async_scale(t.members[i].batch_size, t.batch_sizes)
        lost: list = []
        server_meta, kept = apply_update(t, [i], [grad], lost, lambda owners: [scale] * len(owners))
        if not kept:
            t.stream.give_back(spans)
            lose(t, lost)
            continue
        t_end = time.perf_counter()
        record(t, i, meta, t_arr - t_sub, held, t.step - read, server_meta["server_s"], t_end - t_prev)
        t_prev, applied = t_end, applied + 1
        t.step += 1
        idle[name] = t_end
        bar.update(1)
        bar.set_postfix(loss=f"{meta['loss']:.3f}", staleness=t.step - 1 - read, refresh=False)
        due = due or t.checkpoint_due()
    if due:
        t.save_due_checkpoint()


def get_result(t, ref, i: int):
    """ray.get of a worker's result; a dead worker becomes _WorkerGone, a bug a HetlabError."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        raise _WorkerGone(f"{type(e).__name__}: its node or process went away") from None
    except ray.exceptions.RayTaskError as e:
        raise HetlabError(f"worker {t.members[i].spec.label} failed: {_one_line(e)}") from None


def apply_update(t, owners: list[int], grads: list, lost: list, coefficients_for):
    """Server step with these gradients; one lost with its node drops its owner (→ ``lost``)."""
    while grads:
        weights, meta = t.server.apply.remote(coefficients_for(owners), *grads)
        try:
            info = ray.get(meta, timeout=t.worker_timeout_s)
        except ray.exceptions.ObjectLostError:
            ok = [_fetchable(g) for g in grads]
            lost += [(o, "its result was lost with its node") for o, k in zip(owners, ok) if not k]
            owners = [o for o, k in zip(owners, ok) if k]
            grads = [g for g, k in zip(grads, ok) if k]
            continue
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
            raise HetlabError(f"the parameter server failed: {_one_line(e)}; "
                              f"resume from the last checkpoint.") from None
        t._weights = weights
        t.bytes_to_server += len(grads) * t.n_params * WIRE_DTYPES[t.transfer].itemsize
        return info, owners
    return None, []


def record(t, i, meta, round_trip, wait_s, staleness, server_s, step_s) -> None:
    """One StepRecord; comm = driver-measured round trip − the worker's compute + simulated."""
    comm = max(0.0, round_trip - meta["compute_s"] - meta["simulated_s"])
    t.records.append(StepRecord(
        step=t.step + 1, worker=t.members[i].spec.name, batch_size=t.members[i].batch_size,
        compute_s=meta["compute_s"], simulated_s=meta["simulated_s"], wait_s=wait_s,
        comm_s=comm, loss=meta["loss"], staleness=staleness, server_s=server_s,
        step_s=step_s, samples=meta["samples"]))
    t.samples_seen += meta["samples"]


def lose(t, lost: list) -> None:
    """Drop lost workers, rebalance the global batch over the rest, tell the learner."""
    gone = sorted({i for i, _ in lost})
    keep = [i for i in range(len(t.members)) if i not in gone]
    global_batch = sum(t.batch_sizes)
    why = {i: reason for i, reason in lost}
    labels = t.labels
    for i in gone:
        try:
            ray.kill(t.members[i].actor)
        except Exception:  # noqa: BLE001 - already dead is fine
            pass
    if not keep:
        t.events.append({"event": "all_workers_lost", "step": t.step})
        raise HetlabError(f"every worker was lost at step {t.step} ({'; '.join(why.values())}): "
                          f"reconnect the machines and resume from the last checkpoint.")
    sizes = split_batch(max(global_batch, len(keep)), [t.members[i].batch_size for i in keep])
    t.members = [t.members[i] for i in keep]  # each survivor keeps its actor, H, warm sizes ...
    t.batch_sizes = sizes
    for i in gone:
        t.events.append({"event": "worker_lost", "step": t.step, "time": time.time(), "worker": labels[i],
                         "reason": why[i], "survivors": [s.name for s in t.workers],
                         "batch_sizes": list(sizes)})
        print(f"⚠ lost worker {labels[i]} at step {t.step} ({why[i]}); training goes on with "
              f"{', '.join(t.labels)}; batch sizes rebalanced to {sizes} (global batch {sum(sizes)}).")


class _WorkerGone(Exception):
    """A worker's actor or node went away (internal: becomes a 'worker lost' event)."""


def _one_line(exc: BaseException) -> str:
    """The HetlabError line inside a Ray error if there is one, else its first 300 characters."""
    text = str(exc)
    if "HetlabError: " in text:
        return text.rsplit("HetlabError: ", 1)[1].splitlines()[0].strip()
    return " ".join(text.split())[:300]


def _fetchable(ref) -> bool:
    try:
        ray.get(ref, timeout=10)
        return True
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
        return False
