"""What Ray charges a parameter-server step before any compute (notebooks 05, 08).

A synchronous step makes one round trip: the driver sends each worker the weights and gets
its gradient (``Worker.gradient``); the server's update runs in the driver
(``hetlab.ps.server``; ``benchmarks/server_trip.py`` times the second trip a server actor of
its own would add). A trip costs a call, and an object that must move to the node that reads
it. This times the pieces on your cluster, with buffers the size of the course's model
(``--model``, fp32 and fp16), side by side, alternating:

* an empty call to an actor on the driver's node and on the other node;
* an actor on the driver's node (where a server actor would live) taking a gradient made
  by an actor on its own node, then on the other node;
* a worker call carrying new weights made on the driver's node (where the server's are), to an
  actor on that node, then on the other node;
* a call carrying half the model's fp32 buffer there and back, as a torch tensor and as a numpy
  array.

On the practice cluster "the other node" is the simulated mac's node of this same machine;
with ``HETLAB_ADDRESS`` set it is your Mac. Ray hands objects up to 100 KB inside the call
(``max_direct_call_object_size``); bigger ones go through its object store, and another node
pulls them. ``benchmarks/hetero_efficiency.py`` shows where these costs land in a training
step ("comm" and "handover").

    .venv/bin/python benchmarks/ray_round_trips.py [--model small] [--repeats 30]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hetlab.cluster.roles import placement
from hetlab.core.flat import flat_weights
from hetlab.core.models import make_model
from hetlab.pair import the_pair


@ray.remote(num_cpus=0)
class Probe:
    """A stand-in worker or server: makes, takes and returns flat buffers, computes nothing."""

    def __init__(self, n: int):
        self.n = n

    def empty(self) -> int:
        return 0

    def gradient(self, weights, dtype: str):
        """Take the weights (as a worker does), return a buffer of the model's size (a gradient,
        or the server's new weights)."""
        return torch.ones(self.n, dtype=getattr(torch, dtype))

    def take(self, *grads) -> int:
        return len(grads)

    def echo(self, piece):
        return piece


def median_ms(samples: list[float]) -> float:
    return round(1e3 * statistics.median(samples), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", help="a built-in model name: its size sets the buffers")
    parser.add_argument("--repeats", type=int, default=30, help="timings of each call")
    args = parser.parse_args()
    n = flat_weights(make_model(args.model, seed=0)).numel()

    with the_pair() as pair:
        driver_node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        server = Probe.options(scheduling_strategy=driver_node).remote(n)
        near = Probe.options(scheduling_strategy=driver_node).remote(n)       # a worker beside the server
        far = Probe.options(**placement(pair.workers[1].role)).remote(n)  # the mac's node
        ray.get([p.empty.remote() for p in (server, near, far)])
        piece = {"torch tensor": torch.ones(n // 2)}  # half the fp32 buffer
        piece["numpy array"] = piece["torch tensor"].numpy()
        times: dict[str, list[float]] = {}

        def timed(name: str, call) -> None:
            t0 = time.perf_counter()
            call()
            times.setdefault(name, []).append(time.perf_counter() - t0)

        for _ in range(args.repeats):  # alternate every probe, so load hits them alike
            for where, actor in (("near", near), ("far", far)):
                timed(f"empty call, {where}", lambda: ray.get(actor.empty.remote()))
                for dtype in ("float32", "float16"):
                    grad = actor.gradient.remote(None, dtype)
                    ray.wait([grad], fetch_local=False)  # made, but left where it was made
                    timed(f"server takes a {dtype} gradient, {where}", lambda: ray.get(server.take.remote(grad)))
                    new_weights = server.gradient.remote(None, dtype)  # as Server.apply returns them
                    ray.wait([new_weights], fetch_local=False)
                    timed(f"worker call with {dtype} weights, {where}",
                          lambda: ray.get(actor.gradient.remote(new_weights, "float16")))
                for kind, buffer in piece.items():
                    timed(f"half the weights there and back, {kind}, {where}",
                          lambda: ray.get(actor.echo.remote(buffer)))

    where_name = {"near": "driver's node", "far": f"{pair.workers[1].name}'s node"}
    print(f"ray_round_trips: {pair}; model {args.model!r}, {n:,} parameters "
          f"({4 * n / 1e3:.0f} KB fp32, {2 * n / 1e3:.0f} KB fp16); median of {args.repeats}")
    print(f"  {'what':44s} {where_name['near']:>16s} {where_name['far']:>16s} {'far ÷ near':>11s}")
    result = {"bench": "ray_round_trips", "params": n, "model": args.model, "real_pair": pair.real}
    for what in dict.fromkeys(k.rsplit(", ", 1)[0] for k in times):
        near_ms, far_ms = median_ms(times[f"{what}, near"]), median_ms(times[f"{what}, far"])
        print(f"  {what:44s} {near_ms:13.2f} ms {far_ms:13.2f} ms {far_ms / near_ms:10.2f}×")
        result[what.replace(" ", "_").replace(",", "")] = {"near_ms": near_ms, "far_ms": far_ms,
                                                           "far_over_near": round(far_ms / near_ms, 3)}
    take32, take16 = (result[f"server_takes_a_{d}_gradient"]["far_ms"] for d in ("float32", "float16"))
    result["fp32_over_fp16_far_take"] = round(take32 / take16, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
