"""``hetlab gpu-check``: the course's CUDA claims on the learner's own NVIDIA card, a table and a JSON
line (hetlab.tools.gpucheck.claims does the work). Its arguments name the checks without loading
torch, so ``--help`` and a bad argument answer at once.
"""
from __future__ import annotations

from hetlab.tools.cli.base import subcommand

GPU_CHECK_NAMES = ("describe", "single_device", "notebook01", "sweep")
# hetlab.tools.gpucheck.claims.CHECKS, named here for --help without loading torch


def add_gpu_check(sub) -> None:
    p = subcommand(
        sub, "gpu-check", "on a machine with CUDA: check the course's claims about your card, a table + JSON",
        "Run on your NVIDIA card what notebooks 01 and 02 claim about one, each with a goal:\n"
        "describe/synchronize, benchmarks/single_device.py, notebook 01's full run and\n"
        "notebook 02's sweep. Prints a table and, as its last line, one JSON object.\n"
        "Without CUDA it refuses.",
        "  hetlab gpu-check --quick                 a few minutes\n"
        "  hetlab gpu-check --only describe,sweep")
    p.add_argument("--quick", action="store_true", help="fewer repeats and a shorter sweep")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help=f"run only these checks: {', '.join(GPU_CHECK_NAMES)}")
    p.set_defaults(run=_gpu_check)


def _gpu_check(args) -> int:
    from hetlab import is_quick
    from hetlab.tools.gpucheck import claims
    result = claims.run(args.only, quick=args.quick or is_quick())   # an unknown name: one line, before CUDA's check
    return 0 if result["passed"] else 1
