"""The GPU checks on one device (hetlab.tools.gpucheck.claims): ``describe`` (and why timers wait for
the card), ``single_device`` (benchmarks/single_device.py: tensor batches vs DataLoader),
``notebook01`` (notebook 01's full run to ≥ 99 %) and ``sweep`` (notebook 02's throughput vs
batch size). Each takes the check's context (``claims.Context``: device, sizes) and returns rows.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import time
from pathlib import Path

import torch

from hetlab.errors import HetlabError
from hetlab.tools.gpucheck.report import Goal, Row


def check_describe(ctx) -> list[Row]:
    from hetlab.core.devices import describe, synchronize
    info = describe(ctx.device)
    dev = torch.device(info["device"])
    a = torch.randn(2048, 2048, device=dev)
    for _ in range(3):
        a @ a  # warm-up: cuBLAS initialises on its first product
    synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    launched = time.perf_counter() - t0   # the host queued the work …
    synchronize(dev)
    done = time.perf_counter() - t0       # … and the device finished it
    memory = f"{info['memory_gb']} GiB, " if info["memory_gb"] else ""
    note = (f"{info['name']}, {memory}capability {info['capability']}, bf16 "
            f"{'yes' if info['bf16'] else 'no'}; 20 matmuls: {launched * 1e3:.2f} ms to launch, "
            f"{done * 1e3:.2f} ms to finish (synchronize)")
    row = Row("describe", done / max(launched, 1e-9), "ratio",
              Goal(">=", 2.0, "≥ 2× (timer without synchronize sees only the launch)"), note,
              details=info)
    if info["kind"] != "cuda":
        row.status, row.note = "FAIL", f"not a CUDA device: {note}"
    return [row]


def _load_benchmark(name: str):
    path = Path(__file__).resolve().parents[3] / "benchmarks" / f"{name}.py"
    if not path.is_file():
        raise HetlabError(f"{path} not found: run gpu-check from a hetlab checkout.")
    spec = importlib.util.spec_from_file_location(f"hetlab_benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What tensor batches gain over a DataLoader in training at batch 64 on a card: 2.58× and 2.81× on an H100
# (2026-11-26, 2026-11-28). Each step's launches, not the input pipeline, bound this small model there, so
# the course claims 2.5×, the figure the card gives, not the 3× it once hoped for.
TRAIN_SPEEDUP_GOAL = 2.5
TRAIN_SPEEDUP_TEXT = "≥ 2.5× (an H100 gave 2.58×, 2.81× at batch 64)"


def check_single_device(ctx) -> list[Row]:
    bench = _load_benchmark("single_device")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # its table goes into the record's details
        r = bench.main(["--device", ctx.device, "--samples", str(ctx.sizes.bench_samples),
                        "--repeats", str(ctx.sizes.bench_repeats)])
    note = (f"training {r['samples_per_s_hetlab']:,} vs {r['samples_per_s_dataloader']:,} samples/s "
            f"(tensor batches vs DataLoader), {ctx.sizes.bench_samples} samples, best of "
            f"{ctx.sizes.bench_repeats}")
    details = {**r, "output": out.getvalue()}
    return [Row("train_speedup", r["train_speedup"], "ratio", Goal(">=", TRAIN_SPEEDUP_GOAL, TRAIN_SPEEDUP_TEXT),
                note, details=details),
            Row("pipeline_speedup", r["pipeline_speedup"], "ratio", Goal(">=", 10.0, "≥ 10×"),
                "input pipeline alone: batches ready on the device", details=details)]


def check_notebook01(ctx) -> list[Row]:
    from hetlab.core.data import load_mnist
    from hetlab.core.models import make_model
    from hetlab.core.train import train
    s = ctx.sizes
    train_set, test_set = load_mnist("train"), load_mnist("test")
    if s.nb01_train < len(train_set):
        train_set, test_set = train_set.subset(s.nb01_train), test_set.subset(s.nb01_test)
    t0 = time.perf_counter()
    hist = train(make_model("small", seed=0), train_set, test_set, epochs=s.nb01_epochs,
                 batch_size=s.nb01_batch, device=ctx.device, schedule="cosine", progress=False)
    seconds = time.perf_counter() - t0
    warm = hist.steady
    note = (f"{len(train_set):,} images × {s.nb01_epochs} epochs, batch {s.nb01_batch}, cosine: "
            f"{seconds:.1f} s with evaluation; {hist.samples_per_s:,.0f} samples/s over the run, "
            f"{warm.samples_per_s:,.0f} warm (warm-up {warm.warmup_steps} steps, {warm.warmup_s:.2f} s, "
            f"apart) on {hist.device}")
    return [Row("notebook01", hist.final_accuracy, "fraction",
                Goal(">=", s.nb01_target, f"≥ {s.nb01_target:.1%}"), note,
                details={"seconds": seconds, "test_accuracy": hist.test_accuracy,
                         "samples_per_s": hist.samples_per_s, "steady": warm.as_dict(),
                         "epoch_samples_per_s": hist.epoch_samples_per_s})]


def check_sweep(ctx) -> list[Row]:
    from hetlab.core.train import measure_speed
    from hetlab.core.models import make_model
    s = ctx.sizes
    speeds = {name: [measure_speed(make_model(name), ctx.device, b, steps=s.sweep_steps) for b in s.sweep_batches]
              for name in ("small", "classic")}
    rates = {name: [x.samples_per_s for x in r] for name, r in speeds.items()}
    gain = {name: max(r) / r[0] for name, r in rates.items()}
    table = "; ".join(f"{name} " + " ".join(f"b{b}:{x:,.0f}" for b, x in zip(s.sweep_batches, r))
                      for name, r in rates.items())
    details = {"batch_sizes": list(s.sweep_batches), "samples_per_s": rates,
               "warmup_s": {name: [x.warmup_s for x in r] for name, r in speeds.items()},
               "windows": {name: [list(x.windows) for x in r] for name, r in speeds.items()}}
    best = {name: max(r) for name, r in rates.items()}
    top = s.sweep_batches[-1]
    return [Row("sweep_batching_gain", gain["small"], "ratio", Goal(">", 3.0, "> 3× (small, best vs batch 1)"),
                f"classic gains {gain['classic']:.1f}×; {table} (warm: each batch size's first step apart)",
                details=details),
            # On a CPU or a Mac the classic CNN is slower per sample (more arithmetic); on a card at large
            # batches both are bound by each step's launches and run level (an H100 at 256: small 128,937,
            # classic 136,535). So no goal here: the row says which one was faster on this card.
            Row("sweep_small_vs_classic", best["small"] / best["classic"], "ratio", None,
                f"best small {best['small']:,.0f}, classic {best['classic']:,.0f} samples/s (up to batch {top:,}); "
                f"on a card at large batches both are overhead-bound, so the classic CNN need not be slower "
                f"here (it is on a CPU or a Mac)", details=details)]
