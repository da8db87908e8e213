"""``hetlab gpu-check``: the course's CUDA claims on a machine with an NVIDIA card, a table and
a JSON line (hetlab.tools.gpucheck.claims does the work). Its arguments name the checks without
loading torch, so ``--help`` and a bad argument answer at once.
"""
from __future__ import annotations

from hetlab.errors import HetlabError
from hetlab.tools.cli.base import subcommand

GPU_CHECK_NAMES = ("describe", "single_device", "notebook01", "pair_ps", "pair_raytrain", "autocast",
                   "sweep", "train_128")  # hetlab.tools.gpucheck.claims.CHECKS, named here for --help without loading torch


def add_gpu_check(sub) -> None:
    p = subcommand(
        sub, "gpu-check", "on a machine with CUDA: check the course's GPU claims, a table + JSON",
        "Run on an NVIDIA GPU what the course claims about one, each with a goal:\n"
        "describe/synchronize, benchmarks/single_device.py, notebook 01's full run, the\n"
        "card + this CPU as a real unlike pair (parameter server with an auto-tuned split,\n"
        "and Ray Train), fp16/bf16 autocast and fp16 on the wire, notebook 02's sweep.\n"
        "Prints a table and, as its last line, one JSON object. Without CUDA it refuses.",
        "  hetlab gpu-check --quick                 a few minutes\n"
        "  hetlab gpu-check --only describe,sweep\n"
        "  hetlab gpu-check --record docs/measured   writes DATE-GPU.json and .md there")
    p.add_argument("--quick", action="store_true", help="fewer repeats, steps and epochs: a few minutes")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help=f"run only these checks: {', '.join(GPU_CHECK_NAMES)}")
    p.add_argument("--record", metavar="DIR", help="write the dated record (DATE-GPU.json + .md) into DIR")
    p.add_argument("--pair-batch", type=int, default=None, metavar="B",
                   help="global batch of the pair's efficiency run (default: sized so that the card's step "
                        "is about 100 ms, long next to the parameter server's fixed cost per step)")
    p.add_argument("--stand-in", action="store_true",
                   help="a dry run without a GPU: every check's code on this CPU, Ray counting one GPU on the "
                        "desktop node, tiny sizes; every row says stand-in and no goal is judged")
    p.set_defaults(run=_gpu_check)


def _gpu_check(args) -> int:
    from dataclasses import replace

    from hetlab import is_quick
    from hetlab.tools.cli.train import writable_folder
    if args.pair_batch is not None and args.pair_batch < 2:   # every value before torch loads
        raise HetlabError(f"--pair-batch {args.pair_batch}: must be at least 2 (one sample per worker).")
    if args.record:
        writable_folder("--record", args.record)  # the record is written at the end, after minutes
    from hetlab.tools.gpucheck import claims
    quick = args.quick or is_quick()
    sizes = claims.QUICK if quick else claims.FULL
    if args.pair_batch is not None:
        sizes = replace(sizes, pair_batch=args.pair_batch)
    if args.stand_in:
        sizes = None if args.pair_batch is None else replace(claims.STAND_IN, pair_batch=args.pair_batch)
    result = claims.run(args.only, quick=quick, record=args.record, sizes=sizes, stand_in=args.stand_in)
    return 0 if result["passed"] else 1
