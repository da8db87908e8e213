"""What ``hetlab gpu-check`` reports (hetlab.tools.gpucheck.claims): each figure as a row with its goal
(``Goal``, ``Row``: pass, FAIL, info or error), the readable table and the JSON object printed last,
with what it ran on (``versions``: GPU, driver, CUDA, torch, Ray, commit).

Pure except ``versions``, which asks torch and ``nvidia-smi``; the checks build rows, ``run``
prints them.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import subprocess
from dataclasses import dataclass, field

import torch


# --- rows and goals (pure) -------------------------------------------------------------------

@dataclass(frozen=True)
class Goal:
    """What a figure must be: ``op`` (">=", ">", "<=") ``value``; ``text`` says it for people."""

    op: str
    value: float
    text: str = ""

    def met(self, figure: float | None) -> bool:
        if figure is None or not math.isfinite(figure):
            return False
        return {">=": figure >= self.value, ">": figure > self.value, "<=": figure <= self.value}[self.op]

    def __str__(self) -> str:
        return self.text or f"{self.op} {self.value:g}"


UNITS = {  # how a figure is written in the table
    "ratio": lambda x: f"{x:,.2f}×",
    "fraction": lambda x: f"{x:.2%}",
    "samples/s": lambda x: f"{x:,.0f}/s",
    "relative": lambda x: f"{x:.1e}",
}


@dataclass
class Row:
    """One line of the table: a figure, its goal, pass/fail, and a note on what was measured."""

    name: str
    figure: float | None
    unit: str = "ratio"
    goal: Goal | None = None
    note: str = ""
    status: str = ""           # "pass", "FAIL", "info" (no goal) or "error" (the check broke)
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.status:
            self.status = evaluate(self.figure, self.goal)

    @property
    def figure_text(self) -> str:
        if self.figure is None:
            return "-"
        return UNITS.get(self.unit, lambda x: f"{x:g}")(self.figure)

    def as_json(self) -> dict:
        goal = None if self.goal is None else {"op": self.goal.op, "value": self.goal.value,
                                               "text": str(self.goal)}
        return {"name": self.name, "figure": self.figure, "unit": self.unit, "goal": goal,
                "status": self.status, "note": self.note, "details": self.details}


def evaluate(figure: float | None, goal: Goal | None) -> str:
    """``"pass"``/``"FAIL"`` against ``goal``; ``"info"`` when there is none."""
    if goal is None:
        return "info"
    return "pass" if goal.met(figure) else "FAIL"


def error_row(name: str, exc: BaseException) -> Row:
    """The row of a check that broke: its one-line reason, so the other checks still run."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return Row(name, None, status="error", note=f"{type(exc).__name__}: {text}"[:300])


def render_table(rows: list[Row]) -> str:
    """The readable table: check, figure, goal, result, note."""
    head = ("check", "figure", "goal", "result", "note")
    cells = [head] + [(r.name, r.figure_text, str(r.goal or ""), r.status, r.note) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = []
    for i, c in enumerate(cells):
        lines.append("  ".join(c[j].ljust(widths[j]) for j in range(4)) + "  " + c[4])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 4)
    return "\n".join(lines)


def summary(rows: list[Row], versions: dict, quick: bool, seconds: float, names: list[str]) -> dict:
    """The JSON object printed last (and saved as the record)."""
    return {"check": "gpu_check", "passed": all(r.status in ("pass", "info") for r in rows),
            "quick": quick, "only": names, "seconds": round(seconds, 1), "versions": versions,
            "rows": [r.as_json() for r in rows]}


# --- what it ran on --------------------------------------------------------------------------------

def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def versions(device: str) -> dict:
    """What this check ran on: GPU, driver, CUDA, torch, Ray, Python, hetlab and its commit."""
    from importlib import metadata

    import hetlab
    from hetlab.core.machine import hetlab_commit
    cuda = torch.device(device).type == "cuda"
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None,
            "driver": _nvidia_driver() if cuda else None,
            "cuda": torch.version.cuda, "torch": torch.__version__, "ray": metadata.version("ray"),
            "python": platform.python_version(), "hetlab": hetlab.__version__,
            "hetlab_commit": hetlab_commit(), "device": device, "cpus": os.cpu_count(),
            "host": platform.node(), "date": _dt.date.today().isoformat()}
