"""Would the server beside the fast worker make a synchronous step cheaper? (issue 10, notebook 05)

A prototype for a design decision, not hetlab's engine: the step loop and the server run
inside the fast worker's process, so only the mac pays a Ray round trip each step. It checks
that the prototype and hetlab's engine give bitwise the same weights, then auto-tunes both
and runs them in alternation (as ``benchmarks/hetero_efficiency.py``): efficiency, and each
step's time beyond its slower device's own. The practice cluster only (on a real pair the
prototype's desktop would ask for the GPU hetlab's desktop worker holds). Method and figures
measured so far: docs/measured/course-runs.md, "Benchmarks".

    .venv/bin/python benchmarks/colocated_server.py [--global-batch 512] [--run-steps 24] [--repeats 6]

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import ray
import torch

from hetlab.arithmetic import balance
from hetlab.core.data import load_mnist
from hetlab.core.stream import Stream, split_spans
from hetlab.core.flat import join_pieces, pieces_for, split_pieces
from hetlab.core.simulate import device_seconds
from hetlab.pair import the_pair
from hetlab.ps import ParameterServerTraining
from hetlab.ps.specs import Options
from hetlab.ps.server import Server
from hetlab.ps.specs import WorkerSpec
from hetlab.ps.specs import actor_options
from hetlab.ps.worker import Worker


@ray.remote(num_cpus=0, max_restarts=0)
class Host:
    """The fast worker with the server and the step loop in its own process."""

    def __init__(self, data, mac, model: str, seed: int, lr: float, pieces: dict):
        self.me = Worker(WorkerSpec("desktop", device="cpu"), data, model, Options(seed=seed, lr=lr),
                         pieces=pieces["gradient"])
        self.me.set_threads(2)  # this machine's cores shared by two workers, as hetlab sets it
        self.mac, self.pieces = mac, pieces  # the mac: hetlab's engine's own mac actor
        self.server = Server(model, seed, lr, "sync")
        self.stream = Stream()

    def run(self, steps: int, sizes: list[int]) -> dict:
        """``steps`` sync steps at ``sizes`` (desktop, mac): per step the desktop's compute, the
        mac's round trip, and the step beyond the slower device's own time."""
        k, down = self.pieces["gradient"], self.pieces["weights"]
        self.me.warm(sizes[0])
        ray.get(self.mac.warm.remote(sizes[1]))
        weights = split_pieces(self.server.weights(), down)
        mine, macs, beyond = [], [], []  # beyond: the step − the slower device's own time
        for _ in range(steps):
            spans = split_spans(self.stream.take(sum(sizes)), sizes)
            t0 = time.perf_counter()
            refs = self.mac.gradient.options(num_returns=k + 1).remote(spans[1], *weights)
            arrived = threading.Thread(target=lambda: macs.append(_arrival(refs[-1]) - t0))
            arrived.start()  # notes when the mac's answer comes, while this thread computes
            *grad, mine_reply = self.me.gradient(spans[0], *weights)   # (loss, compute_s, simulated_s, samples)
            mine.append(mine_reply[1])
            arrived.join()
            *theirs, their_reply = ray.get(refs)
            self.server.apply([join_pieces(grad), join_pieces(theirs)], [mine_reply[3], their_reply[3]])
            weights = split_pieces(self.server.weights(), down)
            beyond.append(time.perf_counter() - t0 - max(mine_reply[1], device_seconds(*their_reply[1:3])))
        return {"beyond_s": beyond, "desktop_s": mine, "mac_s": macs, "samples": steps * sum(sizes)}

    def weights(self) -> torch.Tensor:
        return self.server.weights()


def _arrival(ref) -> float:
    ray.wait([ref])
    return time.perf_counter()


def beyond_slowest(records) -> list[float]:
    """Per step of hetlab's engine: its time − the slower worker's compute + simulated time."""
    steps: dict = {}
    for r in records:
        step_s, own = steps.get(r.step, (r.step_s, 0.0))
        steps[r.step] = (step_s, max(own, r.device_s))
    return [step_s - own for step_s, own in steps.values()]


def speeds(run: dict, sizes: list[int]) -> list[float]:
    """Each side's samples/s as auto_tune wants them: desktop its compute, mac its round trip."""
    return [sizes[0] / statistics.mean(run["desktop_s"]), sizes[1] / statistics.mean(run["mac_s"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8, help="steps per standalone run and tuning round")
    parser.add_argument("--run-steps", type=int, default=24, help="steps of each design per alternation")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    g = args.global_batch
    train = load_mnist("train")

    with the_pair(address="local") as pair:  # the practice cluster (docstring)
        with ParameterServerTraining(pair.workers, train, seed=0, progress=False,
                                     batch_sizes=[384, 128]) as engine:
            mac = engine.members[1].actor  # the same mac for both designs; they take turns
            host = Host.options(**actor_options(pair.workers[0])).remote(
                ray.put(train), mac, "small", 0, 1e-3,
                {"gradient": engine.pieces, "weights": pieces_for(engine.weights_bytes)})
            # the same steps give the same weights (sync: Σ (b_i/B)·g_i, then Adam)
            engine.run(3)
            ray.get(host.run.remote(3, [384, 128]))
            same = torch.equal(engine.server.weights(), ray.get(host.weights.remote()))
            print(f"colocated_server: same weights after the same 3 steps: {same}")
            assert same, "the prototype must compute exactly what hetlab's engine computes"

            tuned = balance.auto_tune(lambda s: engine.measure(s, steps=args.steps), g, 2, rounds=6)
            hosted = balance.auto_tune(
                lambda s: speeds(ray.get(host.run.remote(args.steps, s)), s), g, 2, rounds=6)
            alone_at = tuned.batch_sizes
            alone = [engine.standalone_samples_per_s(alone_at, steps=args.steps)]
            eff = {"engine": [], "colocated": []}
            beyond = {"engine": [], "colocated": []}
            for _ in range(args.repeats):
                rates = {}
                t = time.perf_counter()
                recs = engine.run(args.run_steps, batch_sizes=tuned.batch_sizes)
                rates["engine"] = sum(r.samples for r in recs) / (time.perf_counter() - t)
                t = time.perf_counter()
                run = ray.get(host.run.remote(args.run_steps, hosted.batch_sizes))
                rates["colocated"] = run["samples"] / (time.perf_counter() - t)
                beyond["engine"] += beyond_slowest(recs)
                beyond["colocated"] += run["beyond_s"]
                alone.append(engine.standalone_samples_per_s(alone_at, steps=args.steps))
                bracket = [statistics.mean(p) for p in zip(*alone[-2:])]
                for name, rate in rates.items():
                    eff[name].append(balance.efficiency(rate, bracket))
            ray.kill(host)

    med = {k: statistics.median(v) for k, v in eff.items()}
    print(f"  global batch {g}; {args.run_steps} steps × {args.repeats} alternations; each alone at "
          f"{balance.format_split(alone_at)}: "
          f"{', '.join(f'{statistics.mean(a):,.0f}' for a in zip(*alone))} samples/s")
    print(f"  {'design':36s} {'split':22s} {'efficiency':>10}   per alternation")
    for name, sizes in (("engine (server in the driver)", tuned.batch_sizes),
                        ("colocated (server in the desktop)", hosted.batch_sizes)):
        key = name.split()[0]
        print(f"  {name:36s} {balance.format_split(sizes):22s} {med[key]:10.1%}   "
              f"{', '.join(f'{e:.1%}' for e in eff[key])}")
    beyond_ms = {k: round(1e3 * statistics.median(v), 2) for k, v in beyond.items()}
    print(f"  a step beyond its slower device's own time (median ms): engine {beyond_ms['engine']:.2f}, "
          f"colocated {beyond_ms['colocated']:.2f}")
    print(json.dumps({"bench": "colocated_server", "efficiency_engine": round(med["engine"], 4),
                      "efficiency_colocated": round(med["colocated"], 4),
                      "colocated_over_engine": round(med["colocated"] / med["engine"], 4),
                      "efficiency_engine_each": [round(e, 4) for e in eff["engine"]],
                      "efficiency_colocated_each": [round(e, 4) for e in eff["colocated"]],
                      "engine_batch_sizes": tuned.batch_sizes, "colocated_batch_sizes": hosted.batch_sizes,
                      "beyond_slowest_ms": beyond_ms,
                      "same_weights": same, "global_batch": g, "run_steps": args.run_steps}))


if __name__ == "__main__":
    main()
