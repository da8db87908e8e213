"""The dated record a maintainer commits to docs/measured/ (``python -m harness.gpucheck --record DIR``):
``DATE-GPU.json`` (the JSON object the check prints last) and ``.md`` (for people), with what the check
ran on (``versions``), and where a copy sent to a GPU machine has no ``.git``, the commit and
the Ray wheel that scripts/gpu_carry.py carried there (``HETLAB_COMMIT``, ``HETLAB_RAY_WHEEL``).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from hetlab.tools.gpucheck import Row

COMMIT_ENV = "HETLAB_COMMIT"        # hetlab's git commit where no git is (scripts/gpu_run.sh sets it)
RAY_WHEEL_ENV = "HETLAB_RAY_WHEEL"  # the Ray wheel carried to a GPU machine


def versions(device: str) -> dict:
    """What the check ran on: GPU, driver, CUDA, torch, Ray, Python, hetlab and its commit (the carried
    copy's where scripts/gpu_run.sh names it), and the carried Ray wheel."""
    import datetime
    import platform
    import subprocess
    from importlib import metadata

    import torch

    import hetlab
    from hetlab.core.machine import hetlab_commit
    cuda = torch.device(device).type == "cuda"
    driver = None
    if cuda:
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            driver = (smi.stdout.split() or [None])[0] if smi.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            pass
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None, "driver": driver,
            "cuda": torch.version.cuda, "torch": torch.__version__, "ray": metadata.version("ray"),
            "python": platform.python_version(), "hetlab": hetlab.__version__,
            "hetlab_commit": os.environ.get(COMMIT_ENV) or hetlab_commit(), "device": device,
            "cpus": os.cpu_count(), "host": platform.node(), "date": datetime.date.today().isoformat(),
            "ray_wheel": os.environ.get(RAY_WHEEL_ENV)}


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
             f"`python -m harness.gpucheck{' --quick' if result['quick'] else ''}` "
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

