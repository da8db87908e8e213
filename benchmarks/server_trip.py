"""Where should the parameter server live: in an actor of its own, or in the driver? (notebook 05)

A synchronous step needs every worker's gradient before the server can update, so the
driver waits for each of them anyway. With the server in an actor of its own (Ray's
parameter-server example), the driver then sends the gradients on to it and waits for the
new weights: a second round trip every step. hetlab keeps the server in the driver's
process (``hetlab.ps.server``): one trip. This runs both on the same workers, the same
split and the same training, alternating blocks of ``--steps`` sync steps, plus a third way:
the server in the driver with this benchmark's process on one torch thread (hetlab leaves
the driver's threads as they are; the driver's machine also runs a worker, which a second
thread could slow).

    overhead per step = the step's time − the slower worker's own compute + simulated time

On the practice cluster (default) the "mac" worker is SIMULATED 4× slower; with
HETLAB_ADDRESS set, your own pair (``hetlab.pair.the_pair``).

    .venv/bin/python benchmarks/server_trip.py [--global-batch 512] [--steps 24] [--blocks 8]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import ray
import torch

from hetlab.arithmetic import balance
from hetlab.core.data import load_mnist
from hetlab.core.stream import split_spans
from hetlab.core.simulate import device_seconds
from hetlab.pair import the_pair
from hetlab.ps import ParameterServerTraining, server

WAYS = ("server actor (two trips)", "in the driver (hetlab)", "in the driver, one thread")


@ray.remote(num_cpus=0)
class ServerActor:
    """hetlab's ``Server`` in an actor of its own on the driver's node (hetlab's engine before
    this benchmark): gradients come to it, new weights go back, one object each."""

    def __init__(self, *args):
        torch.set_num_threads(1)
        self.server = server.Server(*args)

    def ready(self) -> bool:
        return True

    def apply(self, samples, *grads):
        self.server.apply([torch.from_numpy(g.copy()) for g in grads], samples)   # Ray's arrays are read-only
        return self.server.weights(), len(samples)   # the second: a small object to wait for


def actor_steps(training, actor, weights, n: int) -> tuple[list, list, list]:
    """``n`` sync steps with the server in ``actor``: (step times, busy times, the weights' refs)."""
    sizes, steps, busy = training.batch_sizes, [], []
    for _ in range(n):
        t0 = time.perf_counter()
        shares = split_spans(training.stream.take(sum(sizes)), sizes)
        sent = [training.actors[name].gradient.options(num_returns=2).remote(spans, weights)
                for name, spans in zip(training.names, shares)]
        replies = ray.get([s[1] for s in sent], timeout=60)   # (loss, compute_s, simulated_s, samples)
        weights, version = actor.apply.options(num_returns=2).remote([r[3] for r in replies], *[s[0] for s in sent])
        ray.get(version, timeout=60)
        steps.append(time.perf_counter() - t0)
        busy.append(max(device_seconds(r[1], r[2]) for r in replies))
    return steps, busy, weights


def driver_steps(training, n: int) -> tuple[list, list]:
    """``n`` sync steps of hetlab's own engine: (step times, busy times)."""
    records = training.run(n)
    steps = {r.step: r.step_s for r in records}
    busy: dict = {}
    for r in records:
        busy[r.step] = max(busy.get(r.step, 0.0), r.device_s)
    return [steps[s] for s in sorted(steps)], [busy[s] for s in sorted(steps)]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=24, help="sync steps per block")
    parser.add_argument("--blocks", type=int, default=8, help="blocks per way, alternating")
    args = parser.parse_args()
    g = args.global_batch

    with the_pair() as pair, ParameterServerTraining(pair.workers, load_mnist("train"), seed=0,
                                                     progress=False) as training:
        training.resplit(balance.split_batch(g, training.standalone_samples_per_s(g // 2, steps=3)))
        training.run(3)  # warm-up at these sizes
        actor = ServerActor.options(num_cpus=0).remote(training.factory, 0, training.options["lr"], training.mode)
        ray.get(actor.ready.remote(), timeout=60)
        overhead = {w: [] for w in WAYS}
        rate = {w: [] for w in WAYS}
        for _ in range(args.blocks):
            for way in WAYS:
                # each way goes on from the weights the last one left (the actor starts from its own)
                with server.one_thread() if way == WAYS[2] else contextlib.nullcontext():
                    if way == WAYS[0]:
                        steps, busy, _ = actor_steps(training, actor, training.weights, args.steps)
                    else:
                        steps, busy = driver_steps(training, args.steps)
                overhead[way].append(1e3 * statistics.mean(s - b for s, b in zip(steps, busy)))
                rate[way].append(g * len(steps) / sum(steps))
        ray.kill(actor)
        labels, sizes = training.labels, training.batch_sizes

    print(f"server_trip: global batch {g} split {balance.format_split(sizes)} over {', '.join(labels)}; "
          f"{args.blocks} alternating blocks of {args.steps} sync steps per way")
    print(f"  {'where the server lives':28s} {'overhead ms/step':>17} {'samples/s':>10}   overhead per block")
    for way in WAYS:
        print(f"  {way:28s} {statistics.median(overhead[way]):17.2f} {statistics.median(rate[way]):10,.0f}   "
              f"{' '.join(f'{o:.1f}' for o in overhead[way])}")
    ratio = [d / a for d, a in zip(rate[WAYS[1]], rate[WAYS[0]])]
    threads_ratio = [t / d for d, t in zip(rate[WAYS[1]], rate[WAYS[2]])]
    print(f"  hetlab ÷ server actor, samples/s per block: {' '.join(f'{r:.3f}' for r in ratio)} "
          f"(median {statistics.median(ratio):.3f})")
    print(f"  one thread ÷ the driver's own threads:     {' '.join(f'{r:.3f}' for r in threads_ratio)} "
          f"(median {statistics.median(threads_ratio):.3f})")
    print(json.dumps({"bench": "server_trip", "global_batch": g, "batch_sizes": sizes,
                      "overhead_ms": {w: round(statistics.median(o), 2) for w, o in overhead.items()},
                      "samples_per_s": {w: round(statistics.median(r)) for w, r in rate.items()},
                      "driver_vs_actor_samples_per_s": round(statistics.median(ratio), 4),
                      "driver_vs_actor_each": [round(r, 4) for r in ratio],
                      "one_thread_vs_all_threads": round(statistics.median(threads_ratio), 4),
                      "driver_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
