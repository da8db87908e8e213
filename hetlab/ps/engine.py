"""How one parameter-server step is driven: sync rounds, async updates, lost workers (notebooks 05, 08).

``Engine`` is the base class of ``ParameterServerTraining``: its methods submit work to the
worker actors, wait with ``ray.wait`` (never an unbounded ``ray.get``), apply results on the
server (an object in the driver's process, ``hetlab.ps.server``), write ``StepRecord``s and,
when a worker's node disappears, drop that worker, rebalance the global batch over the rest
with ``hetlab.balance.split_batch`` and tell the learner (a printed line and an entry in
``events``). A sync round is Ray's own parameter-server loop,
``grads = [w.gradient.remote(weights) ...]`` then ``weights = server.apply(ray.get(grads))``
(in the driver), plus timings and faults: one round trip per step. Weights and gradients
travel as one object, or for a small model as a few pieces that Ray hands inside the calls
(``hetlab.flat.pieces_for``; ``benchmarks/ray_round_trips.py`` says why).

Which samples: every message carries its positions of the shuffled stream, taken from
the training's one cursor ``stream`` (``hetlab.data.Stream``). A sync step takes the
next B = Σb_i positions and gives worker i its consecutive b_i of them (one big batch,
drawn uniformly); an async message takes the next b_i. Positions of a message that is
never applied (its worker was lost) are given back, and the next message trains them.
"""
from __future__ import annotations

import re
import time

import ray
import torch

from hetlab.balance import split_batch
from hetlab.data import split_spans
from hetlab.errors import HetlabError
from hetlab.flat import join_pieces, split_pieces
from hetlab.ps.specs import StepRecord, async_scale, combine_coefficients, staleness_allows


class Engine:
    """The steps of a ``ParameterServerTraining`` (its base class): sync rounds, async updates,
    a lost worker. They use the training's workers (``members``), its ``server``, its data
    cursor (``stream``), the current weights as the calls take them (``_weights``, in pieces)
    and its ``records``; ``ParameterServerTraining`` sets them up and calls ``run``."""

    def _sync_round(self) -> None:
        """One synchronous step (or one local-SGD round) over every live worker."""
        t0 = time.perf_counter()
        sizes = [self.steps_per_message(i) * m.batch_size for i, m in enumerate(self.members)]
        shares = split_spans(self.stream.take(sum(sizes)), sizes)
        sent = [self._submit(i, spans) for i, spans in enumerate(shares)]   # ([gradient pieces], meta) refs
        metas, arrived, lost = self._gather([meta for _, meta in sent], t0)
        survivors = sorted(metas)
        if survivors:
            server_meta, survivors = self._apply_update(
                survivors, [sent[i][0] for i in survivors], lost,
                lambda owners: combine_coefficients([metas[o]["samples"] for o in owners]))
        self.stream.give_back([span for i in {i for i, _ in lost} for span in shares[i]])
        if not survivors:
            self._lose(lost)  # raises: nobody left
        t_end, last = time.perf_counter(), max(arrived[i] for i in survivors)
        for i in survivors:
            self._record(i, metas[i], arrived[i] - t0, last - arrived[i], 0, server_meta, t_end - t0)
        self.step += 1
        if lost:
            self._lose(lost)

    def _submit(self, i: int, spans: list):
        """Start worker i's next message on the positions ``spans``; returns (the refs of its
        gradient's or delta's pieces, its meta's ref). The weights go as ``_publish`` made them."""
        actor = self.members[i].actor
        self.bytes_to_workers += self.weights_bytes
        k = self.pieces["gradient"]
        if self.mode == "local_sgd":
            refs = actor.local_round.options(num_returns=k + 1).remote(
                spans, self.steps_per_message(i), *self._weights, pieces=k)
        else:
            refs = actor.gradient.options(num_returns=k + 1).remote(spans, *self._weights, pieces=k)
        return refs[:-1], refs[-1]

    def _gather(self, metas: list, t0: float):
        """Wait for worker i's ``metas[i]`` until ``worker_timeout_s`` after ``t0``:
        ({i: meta}, {i: time it arrived}, [(i, why it was lost)])."""
        pending = {ref: i for i, ref in enumerate(metas)}
        results, arrived, lost = {}, {}, []
        deadline = t0 + self.worker_timeout_s
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1,
                                timeout=max(0.0, deadline - time.perf_counter()))
            if not ready:
                lost += [(i, f"no answer within {self.worker_timeout_s:.0f} s") for i in pending.values()]
                break
            now = time.perf_counter()
            for ref in ready:
                i = pending.pop(ref)
                try:
                    results[i], arrived[i] = self._get_result(ref, i), now
                except _WorkerGone as gone:
                    lost.append((i, str(gone)))
        return results, arrived, lost

    def _async_updates(self, steps: int, bar) -> None:
        """Apply each gradient as it arrives; a worker waits while the staleness bound says so.

        A checkpoint falls due after an update: new messages wait until those in flight are
        applied, then it is saved. So nothing is ever in flight in a checkpoint: its server
        state and its cursor (``self.stream``) describe the same updates, and resuming it
        continues exactly (notebook 08).
        """
        idle = {m.spec.name: time.perf_counter() for m in self.members}  # name → idle since
        in_flight: dict = {}  # meta ref → (name, grad ref, version read, t_submit, held_s, spans)
        applied, t_prev, due = 0, time.perf_counter(), False
        while applied < steps:
            if due and not in_flight:
                self.save_due_checkpoint()  # it drops a worker gone since its last message
                idle = {m.spec.name: idle[m.spec.name] for m in self.members}
                due = False
            for name in sorted(idle, key=idle.get):
                reads = [v[2] for v in in_flight.values()]
                if due or applied + len(in_flight) >= steps or not staleness_allows(self.step, reads, self.max_staleness):
                    break
                now, i = time.perf_counter(), self.index_of(name)
                spans = self.stream.take(self.members[i].batch_size)
                grad, meta = self._submit(i, spans)
                in_flight[meta] = (name, grad, self.step, now, now - idle.pop(name), spans)
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.worker_timeout_s)
            if not ready:
                for v in in_flight.values():
                    self.stream.give_back(v[5])
                self._lose([(self.index_of(v[0]), f"no answer within {self.worker_timeout_s:.0f} s")
                            for v in in_flight.values()])
                in_flight.clear()
                continue
            name, grad, read, t_sub, held, spans = in_flight.pop(ready[0])
            t_arr, i = time.perf_counter(), self.index_of(name)
            try:
                meta = self._get_result(ready[0], i)
            except _WorkerGone as gone:
                self.stream.give_back(spans)
                self._lose([(i, str(gone))])
                continue
            scale = async_scale(self.members[i].batch_size, self.batch_sizes)
            lost: list = []
            server_meta, kept = self._apply_update([i], [grad], lost, lambda owners: [scale] * len(owners))
            if not kept:
                self.stream.give_back(spans)
                self._lose(lost)
                continue
            t_end = time.perf_counter()
            self._record(i, meta, t_arr - t_sub, held, self.step - read, server_meta, t_end - t_prev)
            t_prev, applied = t_end, applied + 1
            self.step += 1
            idle[name] = t_end
            bar.update(1)
            bar.set_postfix(loss=f"{meta['loss']:.3f}", staleness=self.step - 1 - read, refresh=False)
            due = due or self.checkpoint_due()
        if due:
            self.save_due_checkpoint()

    def _answers(self, refs: dict, what: str,
                 then: str = "run a step (it drops a lost worker) and try again") -> dict:
        """{i: answer} of calls that are not steps (``refs``: {i: a call's ref to ``members[i]``})
        within ``worker_timeout_s``; a worker that went away is one line, not Ray's traceback."""
        keys = list(refs)
        got, _, lost = self._gather([refs[i] for i in keys], time.perf_counter())
        if lost:
            who = "; ".join(f"{self.members[keys[j]].spec.label}: {why}" for j, why in lost)
            raise HetlabError(f"a worker went away while {what} ({who}): {then}.")
        return {keys[j]: answer for j, answer in got.items()}

    def _get_result(self, ref, i: int):
        """ray.get of a worker's result; a dead worker becomes _WorkerGone, a bug a HetlabError."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as e:
            raise _WorkerGone(f"{type(e).__name__}: its node or process went away") from None
        except ray.exceptions.RayTaskError as e:
            raise HetlabError(f"worker {self.members[i].spec.label} failed: {_one_line(e)}") from None

    def _apply_update(self, owners: list[int], grads: list, lost: list, coefficients_for):
        """The server's step with these gradients (their pieces' refs); one lost with its node
        drops its owner (→ ``lost``). Returns (the server's meta plus ``update_s``: fetching the
        gradients, the step, the new weights ready to send; the owners kept)."""
        t0 = time.perf_counter()
        while grads:
            try:  # one get, one deadline, for every piece of every gradient
                got = iter(ray.get([ref for grad in grads for ref in grad], timeout=self.worker_timeout_s))
                flats = [join_pieces([next(got) for _ in grad]) for grad in grads]
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
                ok = [_fetchable(g) for g in grads]
                if all(ok):
                    raise HetlabError(f"could not fetch the workers' gradients ({_one_line(e)}): "
                                      f"resume from the last checkpoint.") from None
                lost += [(o, "its result was lost with its node") for o, fine in zip(owners, ok) if not fine]
                owners = [o for o, fine in zip(owners, ok) if fine]
                grads = [g for g, fine in zip(grads, ok) if fine]
                continue
            weights, info = self.server.apply(coefficients_for(owners), flats)
            self._weights = self._publish(weights)
            info["update_s"] = time.perf_counter() - t0
            self.bytes_to_server += len(grads) * self.gradient_bytes
            return info, owners
        return None, []

    def _publish(self, weights: torch.Tensor) -> list:
        """The flat weights as the workers' calls take them: a small model's in pieces that Ray
        copies into each call, a big one put once into Ray's object store (each worker's node
        pulls it from there)."""
        pieces = split_pieces(weights, self.pieces["weights"])
        return [ray.put(p) if isinstance(p, torch.Tensor) else p for p in pieces]

    def _record(self, i, meta, round_trip, wait_s, staleness, server_meta, step_s) -> None:
        """One StepRecord; comm = driver-measured round trip − the worker's compute + simulated."""
        comm = max(0.0, round_trip - meta["compute_s"] - meta["simulated_s"])
        self.records.append(StepRecord(
            step=self.step + 1, worker=self.members[i].spec.name, batch_size=self.members[i].batch_size,
            compute_s=meta["compute_s"], simulated_s=meta["simulated_s"], wait_s=wait_s,
            comm_s=comm, loss=meta["loss"], staleness=staleness, server_s=server_meta["server_s"],
            update_s=server_meta["update_s"], step_s=step_s, samples=meta["samples"]))
        self.samples_seen += meta["samples"]

    def _lose(self, lost: list) -> None:
        """Drop lost workers, rebalance the global batch over the rest, tell the learner."""
        gone = sorted({i for i, _ in lost})
        keep = [i for i in range(len(self.members)) if i not in gone]
        global_batch = sum(self.batch_sizes)
        why = {i: reason for i, reason in lost}
        labels = self.labels
        for i in gone:
            try:
                ray.kill(self.members[i].actor)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
        if not keep:
            self.events.append({"event": "all_workers_lost", "step": self.step})
            raise HetlabError(f"every worker was lost at step {self.step} ({'; '.join(why.values())}): "
                              f"reconnect the machines and resume from the last checkpoint.")
        sizes = split_batch(max(global_batch, len(keep)), [self.members[i].batch_size for i in keep])
        self.members = [self.members[i] for i in keep]  # each survivor keeps its actor, H, warm sizes ...
        self.batch_sizes = sizes
        for i in gone:
            self.events.append({"event": "worker_lost", "step": self.step, "time": time.time(),
                                "worker": labels[i], "reason": why[i],
                                "survivors": [s.name for s in self.workers], "batch_sizes": list(sizes)})
            print(f"⚠ lost worker {labels[i]} at step {self.step} ({why[i]}); training goes on with "
                  f"{', '.join(self.labels)}; batch sizes rebalanced to {sizes} (global batch {sum(sizes)}).")


class _WorkerGone(Exception):
    """A worker's actor or node went away (internal: becomes a 'worker lost' event)."""


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
