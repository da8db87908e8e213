"""Check a real NVIDIA GPU: what the course claims about one card, in one command (README "Check a
real NVIDIA GPU"; ``hetlab gpu-check``, ``make gpu-check``).

Every notebook runs on a CPU; this runs what notebooks 01 and 02 say about CUDA on the learner's own
card, each check with a goal (``CHECKS``), and prints a table of rows, then one JSON line. Without
CUDA it refuses in one line. The card in a pair with this machine's CPU, its options and the dated
record a maintainer commits are the harness's (``python -m harness.gpucheck``, docs/gpu-machine.md).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from hetlab.errors import HetlabError
from hetlab.store.measured import QUICK_SWEEP_BATCHES, SWEEP_BATCHES
from hetlab.tools.gpucheck.device import check_describe, check_notebook01, check_single_device, check_sweep
from hetlab.tools.gpucheck.report import Row, error_row, render_table, summary, versions


@dataclass(frozen=True)
class Sizes:
    """How much each check runs. Notebook 01's recipe is the notebook's full one in both modes
    (seconds on a GPU); ``QUICK`` trims repeats and the sweep."""

    bench_samples: int = 12000       # benchmarks/single_device.py --samples
    bench_repeats: int = 3
    nb01_train: int = 60000          # notebook 01: all of MNIST, 6 epochs, batch 64, cosine, ≥ 99 %
    nb01_test: int = 10000
    nb01_epochs: int = 6
    nb01_batch: int = 64
    nb01_target: float = 0.99
    sweep_batches: tuple = SWEEP_BATCHES   # notebook 02's sweep, full mode
    sweep_steps: int = 10


FULL = Sizes()
QUICK = replace(FULL, bench_repeats=2, sweep_batches=QUICK_SWEEP_BATCHES, sweep_steps=3)


@dataclass
class Context:
    """What every check reads: the device it runs on and how much it runs."""

    device: str
    sizes: Sizes


# Each returns rows (name, figure, goal, pass/fail, note).
CHECKS: dict[str, Callable[[Context], list[Row]]] = {
    # the card, and why every timing waits for it (a timer that does not measures only launches)
    "describe": check_describe,
    "single_device": check_single_device,   # benchmarks/single_device.py: tensor pipeline vs DataLoader
    "notebook01": check_notebook01,         # notebook 01's full run (its recipe) to ≥ 99 %
    "sweep": check_sweep,                   # notebook 02's throughput-vs-batch sweep on CUDA
}


def select(only: str | list[str] | None, checks: dict = CHECKS) -> list[str]:
    """``--only NAME[,NAME]`` → the check names in run order; an unknown name is one line."""
    if not only:
        return list(checks)
    wanted = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in wanted if n not in checks]
    if unknown or not wanted:
        raise HetlabError(f"--only {','.join(unknown) or repr(only)}: no such check; "
                          f"choose from {', '.join(checks)}.")
    return [n for n in checks if n in wanted]


def require_cuda() -> str:
    """``"cuda"``, or a HetlabError saying why this machine cannot run the check."""
    if torch.cuda.is_available():
        return "cuda"
    build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
    raise HetlabError(f"gpu-check needs an NVIDIA GPU with CUDA, and torch sees none here ({build}): "
                      f"run it on the CUDA desktop, or see docs/gpu-machine.md for a leased GPU machine.")


def run_checks(ctx, names: list[str], checks: dict, out=print) -> list[Row]:
    """The named checks in order, each row printed as it comes; a check that breaks is one error row
    (its one-line reason), and the others still run."""
    rows = []
    for name in names:
        out(f"[gpu-check] {name} …")
        t0 = time.perf_counter()
        try:
            new = checks[name](ctx)
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            new = [error_row(name, exc)]
        for row in new:
            row.details.setdefault("check_seconds", round(time.perf_counter() - t0, 1))
            out(f"[gpu-check]   {row.name}: {row.figure_text} {row.status}")
        rows += new
    return rows


def run(only: str | list[str] | None = None, quick: bool = False, out=print) -> dict:
    """Run the chosen checks on this machine's card: progress, the table, the JSON object (last line)."""
    names, device = select(only), require_cuda()
    started = time.perf_counter()
    rows = run_checks(Context(device, QUICK if quick else FULL), names, CHECKS, out)
    result = summary(rows, versions(device), quick, time.perf_counter() - started, names)
    out(render_table(rows))
    out(json.dumps(result, default=str))
    return result
