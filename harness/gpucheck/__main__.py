"""``python -m harness.gpucheck``: every GPU check on a card, or on this CPU in the card's place
(``--stand-in``, the GPU call's dry run), a table and a JSON line, and with ``--record DIR`` the dated
record. Run from the repository's root; scripts/gpu_run.sh calls it on a leased GPU machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from harness.gpucheck.context import FULL, QUICK, STAND_IN, Context, Sizes
from harness.gpucheck.pair import check_pair_ps, check_pair_raytrain
from harness.gpucheck.record import versions, write_record
from harness.gpucheck.single_device import check_single_device
from harness.gpucheck.train_128 import check_train_128
from harness.gpucheck.wire import check_wire
from hetlab.errors import HetlabError
from hetlab.tools import gpucheck
from hetlab.tools.cli import writable_folder
from hetlab.tools.gpucheck import Row, summary

# hetlab's checks of the card alone, and the pair's and the wire's among them
CHECKS = {"describe": gpucheck.CHECKS["describe"],
          "single_device": check_single_device,   # benchmarks/single_device.py: tensor batches against a DataLoader
          "notebook01": gpucheck.CHECKS["notebook01"],
          # a real unlike pair in one box, nothing simulated: a "desktop" worker on the card and a "mac"
          # worker on the CPU, two practice nodes, sync parameter server, auto-tuned split. Efficiency =
          # together ÷ the two standalone speeds at their shares, same run, at a global batch where the
          # card's step is ~100 ms (pair_batch_for), and an info row at 16,384; accuracy against a
          # single-device run on the same samples
          "pair_ps": check_pair_ps,
          "pair_raytrain": check_pair_raytrain,   # the same pair through Ray Train (hetlab's exchange on CPU copies)
          "wire": check_wire,                     # the pair's gradients sent as fp16
          "sweep": gpucheck.CHECKS["sweep"],
          "train_128": check_train_128}           # the plain loop at batch 128, warm (not a goal)


def render_table(rows: list[Row]) -> str:
    """The readable table: check, figure, goal, result, note."""
    cells = [("check", "figure", "goal", "result")] + [(r.name, r.figure_text, str(r.goal or ""), r.status)
                                                        for r in rows]
    notes = ["note"] + [r.note for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + note for row, note in zip(cells, notes)]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 4)
    return "\n".join(lines)


def run(only: str | list[str] | None = None, quick: bool = False, record: str | None = None,
        sizes: Sizes | None = None, stand_in: bool = False, out=print) -> dict:
    """Run the chosen checks, print progress, the table and the JSON object (last line).

    ``sizes``: how much each check runs (default ``QUICK`` or ``FULL``). ``stand_in``: the CPU in the
    card's place, Ray counting one GPU on the desktop node, tiny sizes; every row says "stand-in" and
    no goal is judged (only a check that broke fails it). Otherwise, without CUDA, it refuses."""
    names = gpucheck.select(only, CHECKS)
    device = "cpu" if stand_in else gpucheck.require_cuda()
    ctx, started = Context(device, sizes or (STAND_IN if stand_in else QUICK if quick else FULL), stand_in), time.perf_counter()
    try:
        rows = gpucheck.run_checks(ctx, names, CHECKS, out)
    finally:
        ctx.close()
    result = summary(rows, versions(device), quick, time.perf_counter() - started, names)
    if stand_in:
        for row in rows:
            if row.status != "error":
                row.status, row.note = "stand-in", f"stand-in (the CPU, not a card): {row.note}"
        result.update(stand_in=True, passed=all(r.status == "stand-in" for r in rows), rows=[r.as_json() for r in rows])
        result["versions"]["gpu"] = "stand-in"   # no card: the CPU stood in for it
    out(render_table(rows))
    if record:
        json_path, md_path = write_record(result, record)
        out(f"record: {json_path} and {md_path}")
    out(json.dumps(result, default=str))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.gpucheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repeats, steps and epochs: a few minutes")
    p.add_argument("--only", metavar="NAME[,NAME]", help=f"run only these checks: {', '.join(CHECKS)}")
    p.add_argument("--record", metavar="DIR", help="write the dated record (DATE-GPU.json + .md) into DIR")
    p.add_argument("--pair-batch", type=int, default=None, metavar="B",
                   help="global batch of the pair's efficiency run (default: sized so that the card's step "
                        "is about 100 ms, long next to the parameter server's fixed cost per step)")
    p.add_argument("--stand-in", action="store_true",
                   help="a dry run without a GPU: every check's code on this CPU, Ray counting one GPU on the "
                        "desktop node, tiny sizes; every row says stand-in and no goal is judged")
    args = p.parse_args(argv)
    try:
        if args.pair_batch is not None and args.pair_batch < 2:
            raise HetlabError(f"--pair-batch {args.pair_batch}: must be at least 2 (one sample per worker).")
        if args.record:
            writable_folder("--record", args.record)  # the record is written at the end, after minutes
        from hetlab import is_quick
        quick = args.quick or is_quick()
        sizes = STAND_IN if args.stand_in else QUICK if quick else FULL
        if args.pair_batch is not None:
            sizes = replace(sizes, pair_batch=args.pair_batch)
        result = run(args.only, quick=quick, record=args.record, sizes=sizes, stand_in=args.stand_in)
    except HetlabError as exc:
        print(f"HetlabError: {exc}", file=sys.stderr)
        return 2
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
