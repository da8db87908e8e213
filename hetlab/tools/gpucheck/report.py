"""What ``hetlab gpu-check`` reports (hetlab.tools.gpucheck.claims): each figure as a row with its goal
(``Goal``, ``Row``: pass, FAIL, info or error), the readable table, the JSON object printed last,
and the dated record for docs/measured/ (``versions``: GPU, driver, CUDA, torch, Ray, commit).

Pure except ``versions``, which asks torch and ``nvidia-smi``; the checks build rows, ``run``
prints and saves them.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hetlab.vocab import COMMIT_ENV, RAY_WHEEL_ENV

ACCURACY_TOLERANCE = 0.005  # a pair's accuracy may trail the single-device run's by 0.5 points


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


def accuracy_goal(reference: float, tolerance: float = ACCURACY_TOLERANCE) -> Goal:
    return Goal(">=", reference - tolerance,
                f"≥ single-device {reference:.2%} − {tolerance * 100:g} pt")


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


# --- versions and the record -------------------------------------------------------------------

def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions(device: str) -> dict:
    """What this check ran on: GPU, driver, CUDA, torch, Ray, Python, hetlab and its commit.

    ``HETLAB_COMMIT`` names the commit where the checkout has no .git (a copy sent to a GPU
    machine; scripts/gpu_carry.py writes it); ``HETLAB_RAY_WHEEL`` says how Ray got there."""
    import hetlab
    from hetlab.core.machine import hetlab_commit
    cuda = torch.device(device).type == "cuda"
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None,
            "driver": _nvidia_driver() if cuda else None,
            "cuda": torch.version.cuda, "torch": torch.__version__, "ray": _dist_version("ray"),
            "python": platform.python_version(), "hetlab": hetlab.__version__,
            "hetlab_commit": os.environ.get(COMMIT_ENV) or hetlab_commit(),
            "ray_wheel": os.environ.get(RAY_WHEEL_ENV), "device": device,
            "cpus": os.cpu_count(), "host": platform.node(),
            "date": _dt.date.today().isoformat()}


def gpu_slug(name: str | None) -> str:
    """A file-name part for a GPU: "NVIDIA H100 80GB HBM3" → "h100", "NVIDIA GeForce RTX 4070 Ti"
    → "rtx-4070-ti"; no GPU → "cpu"."""
    if not name:
        return "cpu"
    drop = {"nvidia", "geforce", "tesla", "pcie", "sxm", "nvl", "hbm", "hbm2", "hbm2e", "hbm3", "hbm3e"}
    parts = [t for t in re.split(r"[\s_\-]+", name.lower())
             if t and t not in drop and not re.fullmatch(r"\d+gb|sxm\d*|hbm\d*e?", t)]
    slug = re.sub(r"[^a-z0-9-]", "", "-".join(parts)).strip("-")
    return slug or "gpu"


def render_markdown(result: dict) -> str:
    """The record for people: what ran, on what, and the table."""
    v = result["versions"]
    lines = [f"# GPU check {v['date']}: {v['gpu'] or v['device']}", "",
             f"`hetlab gpu-check{' --quick' if result['quick'] else ''}` "
             f"({', '.join(result['only'])}): {result['seconds']:.0f} s, "
             f"{'all goals met' if result['passed'] else 'NOT all goals met'}.", "",
             "| version | |", "|---|---|"]
    lines += [f"| {k} | {v[k]} |" for k in ("gpu", "driver", "cuda", "torch", "ray", "ray_wheel", "python",
                                           "hetlab", "hetlab_commit", "cpus", "host") if v.get(k) is not None]
    lines += ["", "| check | figure | goal | result | note |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        row = Row(r["name"], r["figure"], r["unit"], None, r["note"], r["status"])
        goal = (r["goal"] or {}).get("text", "")
        lines.append(f"| {r['name']} | {row.figure_text} | {goal} | {r['status']} | "
                     f"{r['note'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_record(result: dict, directory: str | os.PathLike) -> tuple[Path, Path]:
    """``DIR/DATE-GPU.json`` (the JSON last line's object) and ``.md``; a second run that day gets
    ``-2``, ``-3``, … rather than overwriting the first."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{result['versions']['date']}-{gpu_slug(result['versions']['gpu'])}"
    n = 1
    while (folder / f"{stem}.json").exists() or (folder / f"{stem}.md").exists():
        n += 1
        stem = f"{result['versions']['date']}-{gpu_slug(result['versions']['gpu'])}-{n}"
    paths = folder / f"{stem}.json", folder / f"{stem}.md"
    paths[0].write_text(json.dumps(result, indent=1, default=str) + "\n")
    paths[1].write_text(render_markdown(result))
    return paths

