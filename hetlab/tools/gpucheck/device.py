"""The GPU checks on one device (hetlab.tools.gpucheck.claims): ``describe`` (and why timers wait for
the card), ``single_device`` (benchmarks/single_device.py: tensor batches vs DataLoader),
``notebook01`` (notebook 01's full run to ≥ 99 %), ``sweep`` (notebook 02's throughput vs
batch size) and ``speedups`` (the card options beside the plain loop). Each returns rows.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import time
from pathlib import Path

import torch

from hetlab.errors import HetlabError
from hetlab.tools.gpucheck.context import Context
from hetlab.tools.gpucheck.report import Goal, Row


def check_describe(ctx: Context) -> list[Row]:
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


def check_single_device(ctx: Context) -> list[Row]:
    bench = _load_benchmark("single_device")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # its table goes into the record's details
        r = bench.main(["--device", ctx.device, "--samples", str(ctx.sizes.bench_samples),
                        "--repeats", str(ctx.sizes.bench_repeats)])
    note = (f"training {r['samples_per_s_hetlab']:,} vs {r['samples_per_s_dataloader']:,} samples/s "
            f"(tensor batches vs DataLoader), {ctx.sizes.bench_samples} samples, best of "
            f"{ctx.sizes.bench_repeats}")
    details = {**r, "output": out.getvalue()}
    return [Row("train_speedup", r["train_speedup"], "ratio", Goal(">=", 3.0, "≥ 3×"), note, details=details),
            Row("pipeline_speedup", r["pipeline_speedup"], "ratio", Goal(">=", 10.0, "≥ 10×"),
                "input pipeline alone: batches ready on the device", details=details)]


def check_notebook01(ctx: Context) -> list[Row]:
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
    note = (f"{len(train_set):,} images × {s.nb01_epochs} epochs, batch {s.nb01_batch}, cosine: "
            f"{seconds:.1f} s, {hist.samples_per_s:,.0f} samples/s on {hist.device}")
    return [Row("notebook01", hist.final_accuracy, "fraction",
                Goal(">=", s.nb01_target, f"≥ {s.nb01_target:.1%}"), note,
                details={"seconds": seconds, "test_accuracy": hist.test_accuracy,
                         "samples_per_s": hist.samples_per_s})]


def check_sweep(ctx: Context) -> list[Row]:
    from hetlab.core.devices import throughput
    from hetlab.core.models import make_model
    s = ctx.sizes
    rates = {name: [throughput(make_model(name), ctx.device, b, steps=s.sweep_steps) for b in s.sweep_batches]
             for name in ("small", "classic")}
    gain = {name: max(r) / r[0] for name, r in rates.items()}
    table = "; ".join(f"{name} " + " ".join(f"b{b}:{x:,.0f}" for b, x in zip(s.sweep_batches, r))
                      for name, r in rates.items())
    details = {"batch_sizes": list(s.sweep_batches), "samples_per_s": rates}
    best = {name: max(r) for name, r in rates.items()}
    return [Row("sweep_batching_gain", gain["small"], "ratio", Goal(">", 3.0, "> 3× (small, best vs batch 1)"),
                f"classic gains {gain['classic']:.1f}×; {table}", details=details),
            Row("sweep_small_vs_classic", best["small"] / best["classic"], "ratio",
                Goal(">", 1.0, "> 1× (bigger model slower)"),
                f"best small {best['small']:,.0f}, classic {best['classic']:,.0f} samples/s", details=details)]



def check_speedups(ctx: Context) -> list[Row]:
    """``train`` at batch 128 (notebook 01's model, one pass) plain, with the card options
    (``hetlab.core.speedups``), and with CUDA graphs (torch.compile's warm-up counted in its figure):
    not goals yet, figures beside the plain loop, so that a GPU run can pick the defaults."""
    from hetlab.core.data import load_mnist
    from hetlab.core.models import make_model
    from hetlab.core.speedups import ALL_ON_CUDA, NOT_MEASURED, PLAIN, Speedups
    from hetlab.core.train import train
    data = load_mnist("train").subset(ctx.sizes.bench_samples, seed=0)
    runs = {"plain": PLAIN, "fused_tf32_bf16": ALL_ON_CUDA, "cuda_graphs": Speedups(cuda_graphs=True)}
    rates, rows = {}, []
    for name, options in runs.items():
        if options.cuda_graphs and torch.device(ctx.device).type != "cuda":
            rows.append(Row(f"train_128_{name}", None, "samples/s", None, "needs CUDA: not run here"))
            continue
        hist = train(make_model("small", seed=0), data, epochs=1, batch_size=128, device=ctx.device,
                     progress=False, speedups=options)
        rates[name] = hist.samples_per_s
        gain = "" if name == "plain" else f"; {hist.samples_per_s / rates['plain']:.2f}× the plain loop"
        rows.append(Row(f"train_128_{name}", hist.samples_per_s, "samples/s", None,
                        f"{len(data):,} samples, batch 128, {options.names or 'no options'}{gain}; "
                        f"{NOT_MEASURED if name != 'plain' else 'the plain loop'}",
                        details={"options": options.names, "final_loss": hist.loss[-1]}))
    return rows
