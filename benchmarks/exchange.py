"""hetlab's exchange against gloo's, on two Linux ranks (loopback): per exchange and per whole step.

Between a Mac and a Linux desktop gloo cannot run at all (its two transports never meet), so this is
the only place the two can be set side by side: two processes on this machine, one torch thread each,
the course's small CNN, batch 128 split 64 + 64, Adam. Per exchange: one SUM all-reduce of the model's
flat gradient plus the loss (what ``hetlab.raytrain.loop`` sends each step). Per step: forward and
backward of each rank's share, the scaled all-reduce, the optimizer's step. The backends alternate,
round by round; every run is listed with the median.

    .venv/bin/python benchmarks/exchange.py [--rounds 3] [--steps 150] [--exchanges 500]

Goal (issue 68): a whole step with hetlab's exchange within 10 % of gloo's (step ratio ≥ 0.9 as
gloo ÷ hetlab seconds, median of the rounds). The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
BATCH = 128


def rank_main(rank: int, backend: str, port: int, steps: int, exchanges: int, out) -> None:
    from hetlab.core.data import load_mnist
    from hetlab.core.flat import flat_grad, set_flat_grad
    from hetlab.core.models import make_model
    from hetlab.raytrain import exchange
    from hetlab.raytrain.loop import weights_digest

    torch.set_num_threads(1)
    exchange.register()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    data = load_mnist("train").subset(BATCH * 40, seed=0)
    x, y = data.normalized(), data.labels
    model = make_model("small", seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    share = BATCH // 2
    buf = torch.zeros(sum(p.numel() for p in model.parameters()) + 1)

    def step(i: int) -> None:
        lo = (i * BATCH + rank * share) % (len(y) - share)
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x[lo:lo + share]), y[lo:lo + share])
        loss.backward()
        b = torch.cat([flat_grad(model), loss.detach().view(1)]) * 0.5
        dist.all_reduce(b)
        set_flat_grad(model, b[:-1])
        opt.step()

    for i in range(10):                              # warm-up
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(exchanges):
        dist.all_reduce(buf)
    per_exchange = (time.perf_counter() - t0) / exchanges
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    per_step = (time.perf_counter() - t0) / steps
    digest = weights_digest(model)
    gathered = [None, None]
    dist.all_gather_object(gathered, digest)
    if rank == 0:
        out.put({"exchange_ms": per_exchange * 1e3, "step_ms": per_step * 1e3,
                 "identical": gathered[0] == gathered[1], "values": buf.numel()})
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(backend: str, steps: int, exchanges: int) -> dict:
    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=rank_main, args=(r, backend, port, steps, exchanges, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    result = out.get(timeout=600)
    for p in procs:
        p.join(60)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--exchanges", type=int, default=500)
    args = ap.parse_args()
    runs = {"gloo": [], "hetlab": []}
    print(f"load at start {os.getloadavg()[0]:.2f}; two ranks, one thread each, batch {BATCH} = 64 + 64")
    print(f"{'round':>5} {'backend':>8} {'exchange ms':>12} {'step ms':>9} identical")
    for r in range(args.rounds):
        order = ("gloo", "hetlab") if r % 2 == 0 else ("hetlab", "gloo")
        for backend in order:
            run = one_run(backend, args.steps, args.exchanges)
            runs[backend].append(run)
            print(f"{r + 1:>5} {backend:>8} {run['exchange_ms']:>12.3f} {run['step_ms']:>9.2f} {run['identical']}")
    med = {b: {k: statistics.median(x[k] for x in v) for k in ("exchange_ms", "step_ms")} for b, v in runs.items()}
    exchange_ratio = med["gloo"]["exchange_ms"] / med["hetlab"]["exchange_ms"]
    step_ratio = med["gloo"]["step_ms"] / med["hetlab"]["step_ms"]
    print(f"median: gloo {med['gloo']['exchange_ms']:.3f} ms / {med['gloo']['step_ms']:.2f} ms a step; "
          f"hetlab {med['hetlab']['exchange_ms']:.3f} ms / {med['hetlab']['step_ms']:.2f} ms a step")
    print(f"gloo ÷ hetlab seconds: per exchange {exchange_ratio:.3f}, per step {step_ratio:.3f} (goal ≥ 0.9)")
    print(json.dumps({"benchmark": "exchange", "rounds": args.rounds, "values": runs["gloo"][0]["values"],
                      "runs": runs, "median": med, "exchange_ratio": round(exchange_ratio, 3),
                      "step_ratio": round(step_ratio, 3), "goal_step_ratio": 0.9,
                      "load_at_end": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
