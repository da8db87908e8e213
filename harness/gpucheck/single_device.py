"""``single_device``: benchmarks/single_device.py on the card. Each step's launches, not the input
pipeline, bound this small model on a card, so tensor batches claim 2.5× over a DataLoader in
training, 10× for the pipeline alone."""
from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

from hetlab.errors import HetlabError
from hetlab.tools.gpucheck import Goal, Row


def check_single_device(ctx) -> list[Row]:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "single_device.py"
    if not path.is_file():
        raise HetlabError(f"{path} not found: run gpu-check from a hetlab checkout.")
    spec = importlib.util.spec_from_file_location("hetlab_benchmark_single_device", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out, s = io.StringIO(), ctx.sizes
    with contextlib.redirect_stdout(out):  # its table goes into the record's details
        r = bench.main(["--device", ctx.device, "--samples", str(s.bench_samples), "--repeats", str(s.bench_repeats)])
    note = (f"training {r['samples_per_s_hetlab']:,} vs {r['samples_per_s_dataloader']:,} samples/s "
            f"(tensor batches vs DataLoader), {s.bench_samples} samples, best of {s.bench_repeats}")
    details = {**r, "output": out.getvalue()}
    return [Row("train_speedup", r["train_speedup"], "ratio", Goal(">=", 2.5, "≥ 2.5×"), note, details=details),
            Row("pipeline_speedup", r["pipeline_speedup"], "ratio", Goal(">=", 10.0, "≥ 10×"),
                "input pipeline alone: batches ready on the device", details=details)]
