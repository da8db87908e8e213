"""Check a real NVIDIA GPU: the course's CUDA claims in one command (README "Check a real NVIDIA
GPU"; ``hetlab gpu-check``, ``make gpu-check``; docs/gpu-machine.md for a leased GPU machine).

Every notebook runs on a CPU; this runs what the course says about CUDA, each check with a goal
(``CHECKS``), and prints a table of rows, then one JSON line; ``record=DIR`` writes the dated record
(``gpucheck_report``). Without CUDA it refuses in one line; Ray is imported only where used.
"""
from __future__ import annotations

import json
import time
from typing import Callable

import torch

from hetlab.errors import HetlabError
from hetlab.tools.gpucheck.autocast import check_autocast
from hetlab.tools.gpucheck.context import FULL, QUICK, STAND_IN, Context, Sizes
from hetlab.tools.gpucheck.device import (check_describe, check_notebook01, check_single_device, check_sweep,
                                          check_train_128)
from hetlab.tools.gpucheck.pair import check_pair_ps, check_pair_raytrain
from hetlab.tools.gpucheck.report import Row, error_row, render_table, summary, versions, write_record


# Each returns rows (name, figure, goal, pass/fail, note); what they share is in gpucheck_context.
CHECKS: dict[str, Callable[[Context], list[Row]]] = {
    # the card, and why every timing waits for it (a timer that does not measures only launches)
    "describe": check_describe,
    "single_device": check_single_device,   # benchmarks/single_device.py: tensor pipeline vs DataLoader
    "notebook01": check_notebook01,         # notebook 01's full run (its recipe) to ≥ 99 %
    # a real unlike pair in one box, nothing simulated: a "desktop" worker on the card and a "mac"
    # worker on the CPU, two practice nodes, sync parameter server, auto-tuned split. Efficiency =
    # together ÷ the two standalone speeds at their shares, same run, at a global batch where the
    # card's step is ~100 ms (pair_batch_for), and an info row at 16,384; accuracy against a
    # single-device run on the same samples
    "pair_ps": check_pair_ps,
    "pair_raytrain": check_pair_raytrain,   # the same pair through Ray Train (gloo on CPU copies, one Linux box)
    # fp16 and bf16 autocast on the CUDA worker, the fp16 overflow fallback provoked, fp16 on the wire
    "autocast": check_autocast,
    "sweep": check_sweep,                   # notebook 02's throughput-vs-batch sweep on CUDA
    "train_128": check_train_128,           # the plain loop at batch 128, warm (not a goal)
}


def select(only: str | list[str] | None) -> list[str]:
    """``--only NAME[,NAME]`` → the check names in run order; an unknown name is one line."""
    if not only:
        return list(CHECKS)
    wanted = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in wanted if n not in CHECKS]
    if unknown or not wanted:
        raise HetlabError(f"--only {','.join(unknown) or repr(only)}: no such check; "
                          f"choose from {', '.join(CHECKS)}.")
    return [n for n in CHECKS if n in wanted]


def require_cuda() -> str:
    """``"cuda"``, or a HetlabError saying why this machine cannot run the check (before Ray)."""
    if torch.cuda.is_available():
        return "cuda"
    build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
    raise HetlabError(f"gpu-check needs an NVIDIA GPU with CUDA, and torch sees none here ({build}): "
                      f"run it on the CUDA desktop, or see docs/gpu-machine.md for a leased GPU machine.")


# --- the runner ---------------------------------------------------------------------------------

def run(only: str | list[str] | None = None, quick: bool = False, record: str | None = None,
        sizes: Sizes | None = None, device_override: str | None = None, out=print,
        stand_in: bool = False) -> dict:
    """Run the chosen checks, print progress, the table and the JSON object (last line).

    ``sizes``: how much each check runs (default ``QUICK`` or ``FULL``). ``device_override`` is
    for tests on a CPU box only (tests/test_gpucheck.py): it runs the checks' code on another
    device. ``stand_in`` (``--stand-in``, the GPU call's dry run): the CPU in the card's place, Ray
    counting one GPU on the desktop node, tiny sizes; every row says "stand-in" and no goal is judged
    (only a check that broke fails it). Otherwise, without CUDA, ``hetlab gpu-check`` refuses.
    """
    names = select(only)
    device = "cpu" if stand_in else (device_override or require_cuda())
    sizes = sizes or (STAND_IN if stand_in else QUICK if quick else FULL)
    ctx, rows, started = Context(device, sizes, stand_in), [], time.perf_counter()
    try:
        for name in names:
            out(f"[gpu-check] {name} …")
            t0 = time.perf_counter()
            try:
                new = CHECKS[name](ctx)
            except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
                new = [error_row(name, exc)]
            for row in new:
                row.details.setdefault("check_seconds", round(time.perf_counter() - t0, 1))
                if stand_in and row.status != "error":
                    row.status, row.note = "stand-in", f"stand-in (the CPU, not a card): {row.note}"
                out(f"[gpu-check]   {row.name}: {row.figure_text} {row.status}")
            rows += new
    finally:
        ctx.close()
    result = summary(rows, versions(device), quick, time.perf_counter() - started, names)
    if stand_in:
        result.update(stand_in=True, passed=all(r.status == "stand-in" for r in rows))
        result["versions"]["gpu"] = "stand-in"   # no card: the CPU stood in for it
    out(render_table(rows))
    if record:
        json_path, md_path = write_record(result, record)
        out(f"record: {json_path} and {md_path}")
    out(json.dumps(result, default=str))
    return result
