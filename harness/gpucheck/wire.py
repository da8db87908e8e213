"""The GPU check of fp16 on the wire (``python -m harness.gpucheck``): the card's pair through the
parameter server with its gradients sent as fp16, against the fp32 pair's accuracy and bytes.
"""
from __future__ import annotations

from harness.gpucheck.context import ACCURACY_TOLERANCE, Context
from hetlab.tools.gpucheck import Goal, Row


def check_wire(ctx: Context) -> list[Row]:
    """The pair with fp16 gradients on the wire: its accuracy against the fp32 pair's (same samples
    and split), and the bytes it sent to the server against the fp32 run's."""
    wire, fp32 = ctx.ps_run(transfer="fp16"), ctx.ps_run()
    goal = Goal(">=", fp32["accuracy"] - ACCURACY_TOLERANCE,
                f"≥ fp32 pair {fp32['accuracy']:.2%} − {ACCURACY_TOLERANCE * 100:g} pt")
    ratio = wire["bytes_to_server_per_sample"] / fp32["bytes_to_server_per_sample"]
    return [Row("wire_fp16", wire["accuracy"], "fraction", goal,
                f"gradients sent as fp16: {ratio:.2f}× the fp32 run's bytes to the server",
                details={**wire, "bytes_ratio": ratio})]
