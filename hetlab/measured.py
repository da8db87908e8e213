"""Each machine's own training speeds, kept in a small file: notebook 02 writes, 06 and 08 read.

Notebook 02 times training steps (Adam, the optimizer hetlab trains with) at several batch
sizes and ``save``s the figures of the machine's fastest device as ``measured/<role>.json``:
``desktop.json`` on the desktop, ``mac.json`` on the Mac. Copy the Mac's file into the
desktop's ``measured/`` folder (notebook 02 says how). Then ``speed(role, model, batch)``
answers with the learner's own figure, interpolated between the measured batch sizes, and
its ``.source`` says "measured on <host> …"; without a file it answers the course's assumed
figure, and its ``.source`` says "assumed …".

The folder is ``$HETLAB_MEASURED`` if set, else ``measured/`` in the hetlab checkout (the
same from the notebooks' folder and from the CLI), else ``~/.cache/hetlab/measured``.
Pure Python: no torch, no Ray (the planner uses it).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Sequence

from hetlab.errors import HetlabError
from hetlab.vocab import MEASURED_ENV

FOLDER_ENV = MEASURED_ENV
FORMAT = 1

# Assumed figures (not measured): the small and classic CNN at batch 128 on an RTX 4070 Ti
# (the desktop) and an M2's 10-core GPU (the Mac), estimated from their published specs.
ASSUMED_BATCH = 128
ASSUMED = {"small": {"desktop": 100_000, "mac": 20_000},
           "classic": {"desktop": 30_000, "mac": 8_000}}
ASSUMED_WHAT = {"desktop": "an RTX 4070 Ti", "mac": "an M2 GPU"}


class Speed(float):
    """Training samples/s (a float, usable wherever a number is) and where it came from."""

    source: str

    def __new__(cls, samples_per_s: float, source: str) -> "Speed":
        obj = super().__new__(cls, samples_per_s)
        obj.source = source
        return obj

    @property
    def measured(self) -> bool:
        return self.source.startswith("measured")

    def __repr__(self) -> str:
        return f"Speed({float(self):,.0f} samples/s, {self.source})"


def folder() -> Path:
    """Where the figures live: ``$HETLAB_MEASURED``, else the checkout's ``measured/``, else a cache."""
    if os.environ.get(FOLDER_ENV):
        return Path(os.environ[FOLDER_ENV])
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file():
        return root / "measured"
    return Path.home() / ".cache" / "hetlab" / "measured"


def guess_role() -> str:
    """``"mac"`` on macOS, else ``"desktop"`` (the course's two machines)."""
    return "mac" if sys.platform == "darwin" else "desktop"


def path(role: str, where: str | Path | None = None) -> Path:
    if not isinstance(role, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", role):
        raise HetlabError(f"role {role!r} must be a simple name such as 'desktop' or 'mac'.")
    return Path(where if where is not None else folder()) / f"{role}.json"


def save(role: str, device: dict, batch_sizes: Sequence[int], figures: dict[str, Sequence[float]],
         optimizer: str = "adam", where: str | Path | None = None) -> Path:
    """Write one machine's figures (``{model: samples/s per batch size}``) to ``<role>.json``.

    ``device`` is ``hetlab.devices.describe(...)`` of the device that was timed.
    """
    batch_sizes = [int(b) for b in batch_sizes]
    models = {}
    for model, values in figures.items():
        values = [float(v) for v in values]
        if len(values) != len(batch_sizes) or not all(math.isfinite(v) and v > 0 for v in values):
            raise HetlabError(f"figures for {model!r} need one positive samples/s per batch size "
                              f"{batch_sizes}, got {values}.")
        models[model] = values
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    data = {"format": FORMAT, "role": role, "host": platform.node() or "this machine",
            "device": device.get("device"), "accelerator": device.get("name"), "torch": torch_version,
            "date": datetime.datetime.now().isoformat(timespec="minutes"), "optimizer": optimizer,
            "batch_sizes": batch_sizes, "samples_per_s": models}
    target = path(role, where)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def load(role: str, where: str | Path | None = None) -> dict | None:
    """The figures notebook 02 saved for ``role``, or None if there is no file."""
    p = path(role, where)
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        sizes, models = data["batch_sizes"], data["samples_per_s"]
        ok = (data.get("format") == FORMAT and sizes and all(isinstance(b, int) and b >= 1 for b in sizes)
              and all(len(v) == len(sizes) and all(isinstance(x, (int, float)) and x > 0 for x in v)
                      for v in models.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise HetlabError(f"{p} is not a measurement file from notebook 02: delete it and run "
                          f"notebook 02 on that machine again.")
    return data


def interpolate(batch_sizes: Sequence[int], values: Sequence[float], batch_size: float) -> float:
    """samples/s at ``batch_size``: straight lines between measured sizes on log-log axes (as
    notebook 02 plots them); outside the measured range, the nearest measured value."""
    pairs = sorted(zip(batch_sizes, values))
    exact = [v for b, v in pairs if b == batch_size]
    if exact:
        return float(exact[0])
    if batch_size <= pairs[0][0]:
        return float(pairs[0][1])
    for (b0, v0), (b1, v1) in zip(pairs, pairs[1:]):
        if batch_size <= b1:
            f = math.log(batch_size / b0) / math.log(b1 / b0)
            return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))
    return float(pairs[-1][1])


def assumed(role: str, model: str = "small") -> Speed:
    """The course's assumed figure for ``role`` and ``model``, labelled as such."""
    if model not in ASSUMED or role not in ASSUMED[model]:
        raise HetlabError(f"no assumed speed for {role!r} with model {model!r}: run notebook 02 on that "
                          f"machine to measure it (assumed figures exist for {sorted(ASSUMED)} on desktop and mac).")
    return Speed(ASSUMED[model][role], f"assumed ({ASSUMED_WHAT[role]}, batch {ASSUMED_BATCH}; not measured)")


def speed(role: str, model: str = "small", batch_size: int = ASSUMED_BATCH,
          where: str | Path | None = None) -> Speed:
    """``role``'s samples/s for ``model`` at ``batch_size``: measured if notebook 02 saved it, else assumed."""
    data = load(role, where)
    if data is None or model not in data["samples_per_s"]:
        return assumed(role, model)
    value = interpolate(data["batch_sizes"], data["samples_per_s"][model], batch_size)
    what = ", ".join(str(x) for x in (data.get("device"), data.get("optimizer")) if x)
    return Speed(value, f"measured on {data.get('host', '?')} ({what}) {str(data.get('date', ''))[:10]}".rstrip())
