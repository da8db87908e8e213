"""Would Ray's Compiled Graphs make a synchronous step cheaper? (notebook 05)

A sync step sends both workers the weights and waits for both gradients: one round of
ordinary actor calls (``hetlab.ps.loop``). Ray's Compiled Graphs (beta since Ray 2.44)
compile a fixed graph of actor calls once and then pass each round through channels that
were set up in advance: Ray's documentation promises under 50 µs per call instead of about
1 ms. This times that round both ways on your cluster, with the course's model's buffers
(fp32 weights down, a gradient of the same size up) and a fixed sleep standing in for each
worker's compute, so that only Ray's part differs:

* ordinary calls, the buffers in the pieces hetlab sends (``hetlab.core.flat.pieces_for``);
* one compiled graph over the same two actors (``ray.dag``, ``experimental_compile``), the
  weights as one array, which its channels carry whole.

Alternating blocks, so the load of this machine hits both alike. On the practice cluster (the
default) both workers are on this machine; with ``HETLAB_ADDRESS`` set, your pair (the
other worker on the Mac). hetlab keeps ordinary calls: see the figures and notebook 05 §3.

    .venv/bin/python benchmarks/compiled_graph.py [--model small] [--blocks 6] [--rounds 30] [--work-ms 20]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import ray

from hetlab.cluster.roles import placement
from hetlab.core.flat import flat_weights, pieces_for, split_pieces
from hetlab.core.models import make_model
from hetlab.pair import the_pair


@ray.remote(num_cpus=0)
class Probe:
    """A stand-in worker: takes the weights, sleeps as long as a step's compute, returns a
    gradient of the same size (in as many pieces as it got, each its own return value)."""

    def __init__(self, work_s: float):
        self.work_s = work_s

    def gradient(self, *weights):
        time.sleep(self.work_s)
        grads = tuple(w * 1.0 for w in weights)
        return grads if len(grads) > 1 else grads[0]


def _compile(probes):
    """One compiled graph: the weights to every probe, their gradients back."""
    from ray.dag import InputNode, MultiOutputNode
    with InputNode() as weights:
        return MultiOutputNode([p.gradient.bind(weights) for p in probes]).experimental_compile()


def _time_rounds(round_trip, rounds: int, work_s: float, into: list) -> None:
    """Three untimed rounds (the first after the other way's), then ``rounds`` timed ones:
    each round's time minus the stand-in compute goes ``into`` the list."""
    for _ in range(3):
        round_trip()
    for _ in range(rounds):
        t0 = time.perf_counter()
        round_trip()
        into.append(time.perf_counter() - t0 - work_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", help="a built-in model name: its size sets the buffers")
    parser.add_argument("--blocks", type=int, default=6, help="alternations of the two ways")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per way and block")
    parser.add_argument("--work-ms", type=float, default=20.0, help="each worker's stand-in compute")
    args = parser.parse_args()
    flat = flat_weights(make_model(args.model, seed=0))
    pieces = split_pieces(flat, pieces_for(flat.numel() * 4))
    whole = flat.numpy().copy()
    work = args.work_ms / 1e3

    with the_pair() as pair:
        probes = [Probe.options(**placement(w.role)).remote(work) for w in pair.workers]
        ray.get([p.gradient.remote(whole) for p in probes], timeout=60)
        k = len(pieces)
        ordinary = lambda: ray.get([r for p in probes  # noqa: E731
                                    for r in _refs(p.gradient.options(num_returns=k).remote(*pieces))], timeout=60)
        times: dict[str, list[float]] = {"ordinary actor calls (hetlab)": [], "one compiled graph": []}
        why_not = None
        for _ in range(args.blocks):
            _time_rounds(ordinary, args.rounds, work, times["ordinary actor calls (hetlab)"])
            if why_not is None:
                try:  # compiled for this block only: while a graph is up, its actors' loops take
                    graph = _compile(probes)  # CPU that ordinary calls then lack (p90 ×3 here)
                except Exception as e:  # noqa: BLE001 - a beta feature: say why, time the other way
                    why_not = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                    continue
                try:
                    _time_rounds(lambda: ray.get(graph.execute(whole), timeout=60), args.rounds, work,
                                 times["one compiled graph"])
                finally:
                    graph.teardown()

    print(f"compiled_graph: {pair}; model {args.model!r}, {flat.numel():,} parameters "
          f"({4 * flat.numel() / 1e3:.0f} KB fp32 each way, per worker); {args.blocks} × {args.rounds} "
          f"rounds per way, alternating; a round's time minus the {args.work_ms:g} ms stand-in compute")
    result = {"bench": "compiled_graph", "params": flat.numel(), "real_pair": pair.real, "work_ms": args.work_ms}
    for way, samples in times.items():
        if not samples:
            continue
        med, p90 = (1e3 * statistics.quantiles(samples, n=10)[q] for q in (4, 8))
        print(f"  {way:32s} median {med:6.2f} ms   p90 {p90:6.2f} ms")
        result["compiled_graph_ms" if "compiled" in way else "ordinary_ms"] = round(med, 3)
    if why_not:
        print(f"  one compiled graph: not available here ({why_not})")
        result["compiled_graph_error"] = why_not
    else:
        result["compiled_over_ordinary"] = round(result["compiled_graph_ms"] / result["ordinary_ms"], 3)
        print(f"  compiled ÷ ordinary: {result['compiled_over_ordinary']:.2f}× Ray's time per round")
    print(json.dumps(result))


def _refs(refs) -> list:
    """A call's return refs as a list: with ``num_returns=1`` Ray gives the one ref itself."""
    return list(refs) if isinstance(refs, (list, tuple)) else [refs]


if __name__ == "__main__":
    main()
