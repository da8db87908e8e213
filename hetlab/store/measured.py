"""Each machine's own figures, kept as small JSON files in the figures folder, for the notebooks and ``hetlab report``.

``<role>.json``: notebook 02's sweep and the step line fitted to it; ``notebook-NN.json``: each
notebook's run and its predictions (``save_run``); ``exercises.json``: each graded exercise's last
result; any other named set of figures through ``save_figure``. Every figure read back says where it
came from. The folder: ``$HETLAB_MEASURED``, else the checkout's ``measured/``, else a cache.
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

from hetlab.arithmetic import estimates
from hetlab.errors import HetlabError
from hetlab.arithmetic.steady import samples_per_s
from hetlab.arithmetic.steptime import StepTime, from_sweep
import hetlab
from hetlab.core.machine import origin_label
from hetlab.vocab import MEASURED_ENV

FORMAT = 1

SWEEP_BATCHES = (1, 4, 16, 64, 256, 1024)    # notebook 02's sweep (and the Mac's, measured from afar)
QUICK_SWEEP_BATCHES = (1, 8, 64, 256)


class Labelled(float):
    """A figure (usable wherever a float is: samples/s, or seconds) and where it came from (``.source``)."""

    source: str

    def __new__(cls, value: float, source: str):
        obj = super().__new__(cls, value)
        obj.source = source
        return obj

    def __repr__(self) -> str:
        return f"{float(self):,.4g} ({self.source})"


# Where a saved figure came from (``origin``): every file records it, and every label says it:
# the practice cluster, the learner's pair, or the label of a host playing a machine it is not
# (``core.machine.origin_label``), which is never read as the pair's.
PRACTICE, PAIR = "practice", "pair"
ORIGINS = {PRACTICE: "simulated: the practice cluster, where the mac is this machine slowed down, not your pair",
           PAIR: "your pair"}


def origin(simulated: bool = False) -> str:
    """Where a figure measured now comes from: ``"practice"`` (a simulated machine took part), this
    host's origin label (``HETLAB_ORIGIN``: it plays a machine it is not), else ``"pair"``."""
    if simulated:
        return PRACTICE
    return origin_label() or PAIR


def origin_of(data: dict) -> str:
    """The origin a saved file records (``_stamp``)."""
    return str(data.get("origin") or PAIR)


def describe(kind: str) -> str:
    """What a label says of an origin: the practice cluster's or your pair's, else a host's own label."""
    return ORIGINS.get(kind) or f"{kind}, not your pair"


def _stamp(simulated: bool = False) -> dict:
    """What every file saved here records: its format, the host, when (local time, minutes), the origin."""
    return {"format": FORMAT, "host": platform.node() or "this machine",
            "date": datetime.datetime.now().isoformat(timespec="minutes"), "origin": origin(simulated)}


def folder() -> Path:
    """Where the figures live: ``$HETLAB_MEASURED``, else the checkout's ``measured/``, else a cache."""
    if os.environ.get(MEASURED_ENV):
        return Path(os.environ[MEASURED_ENV])
    root = Path(__file__).resolve().parents[2]
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
         optimizer: str = "adam", where: str | Path | None = None, *, simulated: bool = False,
         speeds: dict | None = None) -> Path:
    """Write one machine's figures (``{model: samples/s per batch size}``) to ``<role>.json``.

    ``device`` is ``hetlab.core.devices.describe(...)`` of the device that was timed; ``simulated``: a
    practice stand-in; ``speeds``: model → ``SteadySpeed.as_dict()`` at the course's batch (the spread).
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
    data = {"role": role, "device": device.get("device"), "accelerator": device.get("name"),
            "torch": torch_version, "optimizer": optimizer, "batch_sizes": batch_sizes, "samples_per_s": models,
            "speeds": _numbers(speeds or {}, f"{role}'s speeds"), "mode": mode()}
    return save_figure(role, data, where, simulated=simulated)


def write(target: Path, data: dict) -> Path:
    """Write ``data`` as JSON to ``target``, whole or not at all (a temporary file, then a rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def load(role: str, where: str | Path | None = None) -> dict | None:
    """The figures notebook 02 saved for ``role``, or None if there is no file."""
    return load_figure(role, where, is_sweep, "run notebook 02 on that machine again")


def is_sweep(data) -> bool:
    """Whether ``data`` is what ``save`` writes: one positive samples/s per batch size, per model."""
    try:
        sizes, models = data["batch_sizes"], data["samples_per_s"]
        return bool(sizes and all(isinstance(b, int) and b >= 1 for b in sizes)
                    and all(len(v) == len(sizes) and all(isinstance(x, (int, float)) and x > 0 for x in v)
                            for v in models.values()))
    except (KeyError, TypeError, AttributeError):
        return False


def keep(role: str, data: dict, where: str | Path | None = None) -> Path:
    """Write another machine's figures, as its own ``save`` wrote them, to ``<role>.json`` here."""
    if not is_sweep(data) or data.get("role") != role:
        raise HetlabError(f"the figures received for {role!r} are not notebook 02's file of that machine: "
                          f"run notebook 02 on it again.")
    return write(path(role, where), data)


def speed(role: str, model: str = "small", batch_size: int = estimates.COURSE_BATCH,
          where: str | Path | None = None) -> Labelled:
    """``role``'s samples/s for ``model`` at ``batch_size``: its step line's b ÷ t(b) (``step_time``:
    fitted to notebook 02's sweep, else estimated), the one meaning of a speed at a batch (``steptime``)."""
    line = step_time(role, model, where)
    return Labelled(samples_per_s(batch_size, line(batch_size)), f"{line.source}, batch {batch_size}")


def step_time(role: str, model: str = "small", where: str | Path | None = None) -> StepTime:
    """``role``'s step time for ``model``: the line fitted to notebook 02's sweep, else estimated."""
    data = load(role, where)
    if data is None or model not in data["samples_per_s"] or len(set(data["batch_sizes"])) < 2:
        return estimates.labelled(role, model)
    what = ", ".join(str(x) for x in (data.get("device"), data.get("optimizer")) if x)
    kind = origin_of(data)
    source = (f"measured on {data.get('host', '?')} ({what}) {str(data.get('date', ''))[:10]}"
              f"{'' if kind == PAIR else f'; {describe(kind)}'}, fitted to {len(data['batch_sizes'])} batch sizes")
    return from_sweep(data["batch_sizes"], data["samples_per_s"][model], source)


def save_engine(engine_s: float, link_s: float | None = None, where: str | Path | None = None, *,
                simulated: bool = False) -> Path:
    """Keep the engine's own cost per exchange (and the link's, if measured) that notebook 05 measured, as
    ``engine.json`` (``save_figure``); ``simulated``: on the practice cluster (read back labelled so)."""
    if not all(v is None or (isinstance(v, (int, float)) and v >= 0) for v in (engine_s, link_s)):
        raise HetlabError(f"engine_s and link_s must be seconds ≥ 0, got {engine_s!r}, {link_s!r}.")
    return save_figure("engine", {"engine_s": engine_s, "link_s": link_s}, where, simulated=simulated)


def engine_cost(where: str | Path | None = None) -> Labelled:
    """The engine's own seconds per exchange: notebook 05's measurement, else the practice figure."""
    data = load_figure("engine", where)
    if data is None:
        return Labelled(estimates.ENGINE_S, estimates.ENGINE_WHERE)
    kind, date = origin_of(data), str(data.get("date", ""))[:10]
    if kind == PAIR:
        return Labelled(data["engine_s"], f"measured on {data.get('host', '?')} in notebook 05 {date}")
    return Labelled(data["engine_s"], f"measured in notebook 05 {date}: {describe(kind)}")


RUN_PREFIX = "notebook-"


def _numbers(value, what: str):
    """``value`` with every number checked finite: a number, None, text, yes/no, or lists and dicts of them."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _numbers(v, what) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers(v, what) for v in value]
    if hasattr(value, "as_dict"):                       # a SteadySpeed
        return _numbers(value.as_dict(), what)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HetlabError(f"{what} must be finite numbers, got {value!r}.")
    return value if isinstance(value, int) else float(value)


def save_run(notebook: str, figures: dict, *, simulated: bool,
             predictions: dict[str, tuple] | None = None, speeds: dict | None = None,
             add: bool = False, where: str | Path | None = None) -> Path:
    """Keep what notebook ``notebook`` measured (``figures``: name → number, list or dict of numbers)
    and each prediction the course made beside it (name → (predicted, measured in the same run or
    None, how it was predicted[, whose figures it used])), as ``notebook-NN.json``; ``speeds``: name →
    ``SteadySpeed`` (or a technique's ``outcome.technique``); ``simulated``: the practice cluster;
    ``add``: keep what an earlier cell of the same run saved. The run's mode (quick or full) is kept."""
    what = f"notebook {notebook}'s figures"
    kept = _numbers(dict(figures), what)
    guesses = {}
    for name, guess in (predictions or {}).items():
        predicted, outcome, how, *more = guess
        if predicted is None:
            raise HetlabError(f"{what}: the prediction {name!r} needs a predicted number.")
        guesses[name] = {"predicted": _numbers(predicted, what), "measured": _numbers(outcome, what),
                         "how": str(how), "whose": str(more[0]) if more else ""}
    data = {"notebook": str(notebook), "simulated": bool(simulated), "figures": kept,
            "predictions": guesses, "speeds": _numbers(dict(speeds or {}), what), "mode": mode()}
    earlier = load_run(notebook, where) if add else None
    if earlier is not None:
        for part in ("figures", "predictions", "speeds"):
            data[part] = {**earlier.get(part, {}), **data[part]}
    return save_figure(f"{RUN_PREFIX}{notebook}", data, where, simulated=simulated)


def load_run(notebook: str, where: str | Path | None = None) -> dict | None:
    """What ``save_run`` kept for ``notebook``, or None if that notebook has not saved a run here."""
    return load_figure(f"{RUN_PREFIX}{notebook}", where,
                       lambda data: isinstance(data["figures"], dict) and isinstance(data["predictions"], dict),
                       f"run notebook {notebook} again")


def save_figure(name: str, data: dict, where: str | Path | None = None, *, simulated: bool | None = None) -> Path:
    """Keep one named set of figures as ``<name>.json``, with its date and origin (``data["origin"]`` if
    given, else ``origin(simulated)``): every file of the figures folder is written this way."""
    kept = {**_stamp(bool(simulated)), "name": name, **_numbers(dict(data), f"the figures of {name!r}")}
    return write(path(name, where), kept)


def load_figure(name: str, where: str | Path | None = None, wanted=lambda data: True,
                again: str = "measure again") -> dict | None:
    """What ``save_figure`` kept as ``<name>.json`` (if ``wanted`` of it), or None if nothing was saved;
    a file from something else, or from an older hetlab, is one line: delete it and ``again``."""
    p = path(name, where)
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        ok = data.get("format") == FORMAT and data.get("name") == name and wanted(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise HetlabError(f"{p} is not hetlab's {name} file: delete it and {again}.")
    return data


def whose(**sources: str) -> str:
    """Whose figures a prediction used, from each input's ``.source`` (role=source): "yours" where
    measured on your machines, "estimated", the practice cluster's, or "not yours" (a host playing a machine)."""
    def one(source: str) -> str:
        source = str(source)
        if "practice" in source or "simulated" in source:
            return "the practice cluster's"
        if "not your pair" in source:
            return "not yours"
        return "yours" if source.startswith("measured") else "estimated"
    kinds = {role: one(src) for role, src in sources.items()}
    if len(set(kinds.values())) == 1:
        return next(iter(kinds.values()))
    return ", ".join(f"{role}: {kind}" for role, kind in kinds.items())


QUICK, FULL = "quick", "full"


def mode() -> str:
    """``"quick"`` under ``HETLAB_QUICK=1`` (fewer samples and steps), else ``"full"``."""
    return QUICK if hetlab.is_quick() else FULL


# --- each graded exercise's last result (``hetlab.course.grading.check``), per exercise and machine, in
# ``exercises.json``; the Mac's reaches the desktop over the cluster (``cluster.figures.fetch_graded``).

GRADED_FILE = "exercises"


def load_graded(where: str | Path | None = None) -> dict[str, dict]:
    """exercise@role → its last result here ({} when no grader has run)."""
    kept = load_figure(GRADED_FILE, where, lambda data: isinstance(data["results"], dict), "run the check cells again")
    return {} if kept is None else kept["results"]


def save_graded(exercise: str, notebook: str, status: str, line: str, role: str | None = None,
                where: str | Path | None = None, source: str = "") -> Path:
    """Keep one grader's result, with the ``source`` the learner wrote, replacing that exercise's
    earlier result on this machine."""
    role = role or guess_role()
    results = load_graded(where)
    results[f"{exercise}@{role}"] = {**_stamp(), "exercise": exercise, "notebook": str(notebook), "role": role,
                                     "status": status, "line": line, "source": source}
    return save_figure(GRADED_FILE, {"results": results}, where)


def keep_graded(results: dict, where: str | Path | None = None) -> Path:
    """Add another machine's results (as its ``load_graded`` read them) to this machine's file."""
    if not isinstance(results, dict) or not all(isinstance(r, dict) and {"exercise", "role", "status"} <= set(r)
                                                for r in results.values()):
        raise HetlabError("the exercise results received are not hetlab's: run the check cells there again.")
    here = load_graded(where)
    for r in results.values():
        key = f"{r['exercise']}@{r['role']}"
        if key not in here or str(here[key].get("date", "")) <= str(r.get("date", "")):
            here[key] = r
    return save_figure(GRADED_FILE, {"results": here}, where)
