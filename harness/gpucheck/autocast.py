"""The GPU check of mixed precision (``python -m harness.gpucheck``): fp16 and bf16 autocast on the card's
parameter-server worker, the fp16 overflow fallback provoked on purpose (weights scaled up until
the loss-scaled gradient overflows; the worker must redo the batch in fp32), and fp16 gradients
on the wire.
"""
from __future__ import annotations

import torch

from harness.gpucheck.context import ACCURACY_TOLERANCE, Context, require
from hetlab.tools.gpucheck import Goal, Row


FIRST_BATCH = [(0, 256)]  # positions 0-255 of the shuffled stream: the first batch


def _worker_gradient(ctx: Context, precision: str, scale: float):
    """The gradient a parameter-server Worker (in this process, no Ray) sends for its first
    batch at the initial weights × ``scale``; same batch for every call."""
    from hetlab.core.models import make_model
    from hetlab.core.flat import flat_weights, join_pieces
    from hetlab.ps.specs import WorkerSpec
    from hetlab.ps.worker import Worker
    w = Worker(WorkerSpec("desktop", device=ctx.device, precision=precision),
               ctx.train_data().subset(1024, seed=1), "small")
    *pieces, _ = w.gradient(FIRST_BATCH, flat_weights(make_model("small", seed=0)) * scale)
    grad = join_pieces(pieces)
    return grad, w


def _fp16_overflows(worker, scale: float) -> bool:
    """Would this batch's fp16 gradient, loss-scaled as the worker does, overflow?"""
    from hetlab.core.stream import stream_indices
    from hetlab.core.flat import flat_weights, load_flat
    from hetlab.core.models import make_model
    from hetlab.ps.worker import LOSS_SCALE
    model = make_model("small", seed=None).to(worker.device)
    load_flat(list(model.parameters()), (flat_weights(make_model("small", seed=0)) * scale).to(worker.device))
    idx = stream_indices(len(worker.y), worker.seed, FIRST_BATCH).to(worker.device)  # _worker_gradient's batch
    xb, yb = worker.x[idx], worker.y[idx]
    with torch.autocast(worker.device.type, dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
    (loss * LOSS_SCALE).backward()
    return not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def check_autocast(ctx: Context) -> list[Row]:
    """On a card: fp16 and bf16 autocast on its worker, the fp16 fallback provoked, fp16 on the wire. As a
    stand-in (the CPU): the same pair runs, but a CPU worker trains in fp32 (``autocast_dtype``), so the
    precision rows say so and the fp16 fallback, which needs fp16 autocast, says it needs CUDA."""
    from hetlab.arithmetic.balance import format_split
    ref = ctx.ps_run()["accuracy"]  # the fp32 pair, same samples and split
    goal = Goal(">=", ref - ACCURACY_TOLERANCE, f"≥ fp32 pair {ref:.2%} − {ACCURACY_TOLERANCE * 100:g} pt")
    on_card = torch.device(ctx.device).type == "cuda"
    rows = []
    for precision in ("fp16", "bf16"):
        run = ctx.ps_run(precision=precision)
        desktop = run["labels"][0]
        if on_card:
            require(f" {precision}" in desktop and "off on" not in desktop,
                     f"autocast {precision} is not on for the card's worker: {desktop}")
        else:
            require("off on" in desktop, f"a CPU worker should train in fp32, not: {desktop}")
        require(run["losses_finite"], f"a non-finite loss in the {precision} run")
        off = "" if on_card else f"autocast {precision} needs a card: the CPU worker trained in fp32; "
        rows.append(Row(f"autocast_{precision}", run["accuracy"], "fraction", goal,
                        f"{off}{desktop} + mac cpu fp32, split {format_split(run['batch_sizes'])}: "
                        f"{run['samples_per_s']:,.0f} samples/s", details=run))
    if on_card:
        rows.append(_fp16_fallback(ctx))
    else:
        rows.append(Row("fp16_overflow_fallback", None, "relative", None,
                        "needs CUDA: fp16 autocast is off on a CPU worker, so there is no fallback to provoke"))
    wire, fp32 = ctx.ps_run(transfer="fp16"), ctx.ps_run()
    ratio = wire["bytes_to_server_per_sample"] / fp32["bytes_to_server_per_sample"]
    rows.append(Row("wire_fp16", wire["accuracy"], "fraction", goal,
                    f"gradients sent as fp16: {ratio:.2f}× the fp32 run's bytes to the server",
                    details={**wire, "bytes_ratio": ratio}))
    return rows


def _fp16_fallback(ctx: Context) -> Row:
    """The fp16 overflow provoked on purpose: the worker must redo the batch in fp32."""
    g32, _ = _worker_gradient(ctx, "fp32", 1.0)
    g16, worker = _worker_gradient(ctx, "fp16", 1.0)
    require(worker.amp_dtype == torch.float16, f"fp16 autocast is off on {worker.device}")
    autocast_diff = _relative(g16, g32)
    scale = next((x for x in (4.0, 16.0, 64.0, 256.0) if _fp16_overflows(worker, x)), None)
    require(scale is not None, "could not make an fp16 gradient overflow (weights × 256)")
    big32, _ = _worker_gradient(ctx, "fp32", scale)
    big16, _ = _worker_gradient(ctx, "fp16", scale)
    require(bool(torch.isfinite(big32).all()), f"the fp32 gradient at weights × {scale:g} is not finite")
    require(bool(torch.isfinite(big16).all()), "the fp16 worker sent a non-finite gradient")
    return Row("fp16_overflow_fallback", _relative(big16, big32), "relative",
               Goal("<=", 1e-4, "≤ 1e-4 from fp32 (batch redone in fp32)"),
               f"weights × {scale:g}: fp16 × loss scale overflows, the worker redid the batch in "
               f"fp32; without overflow fp16 differs from fp32 by {autocast_diff:.1e} (autocast on)",
               details={"scale": scale, "autocast_relative_difference": autocast_diff})
