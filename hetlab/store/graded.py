"""Each graded exercise's last result (``hetlab.course.grading.check``), kept for the report.

One file, ``exercises.json``, in the figures folder: per exercise and machine, the notebook, the
status (right, wrong, your turn), the grader's one line (the mistake it named) and when. The Mac's
(notebook 02's grader runs there too) reaches the desktop over the cluster like its figures
(``hetlab.cluster.figures.fetch_graded``); ``hetlab report`` lists them.
"""
from __future__ import annotations

import datetime
import platform
from pathlib import Path

from hetlab.errors import HetlabError
from hetlab.store import measured

FILE = "exercises"


def _key(exercise: str, role: str) -> str:
    return f"{exercise}@{role}"


def load(where: str | Path | None = None) -> dict[str, dict]:
    """exercise@role → its last result here ({} when no grader has run)."""
    p = measured.path(FILE, where)
    def parse(data):
        return data["results"] if data.get("format") == measured.FORMAT and isinstance(data["results"], dict) else None
    results = measured.read(p, parse, HetlabError(
        f"{p} is not hetlab's file of exercise results: delete it and run the check cells again."))
    return {} if results is None else results


def _write(results: dict, where) -> Path:
    return measured.write(measured.path(FILE, where), {"format": measured.FORMAT, "results": results})


def save(exercise: str, notebook: str, status: str, line: str, role: str | None = None,
         where: str | Path | None = None) -> Path:
    """Keep one grader's result, replacing that exercise's earlier result on this machine."""
    role = role or measured.guess_role()
    results = load(where)
    results[_key(exercise, role)] = {"exercise": exercise, "notebook": str(notebook), "role": role,
                                     "status": status, "line": line, "host": platform.node() or "this machine",
                                     "date": datetime.datetime.now().isoformat(timespec="minutes"),
                                     "origin": measured.origin()}
    return _write(results, where)


def keep(results: dict, where: str | Path | None = None) -> Path:
    """Add another machine's results (as its ``load`` read them) to this machine's file."""
    if not isinstance(results, dict) or not all(isinstance(r, dict) and {"exercise", "role", "status"} <= set(r)
                                                for r in results.values()):
        raise HetlabError("the exercise results received are not hetlab's: run the check cells there again.")
    here = load(where)
    for r in results.values():
        key = _key(r["exercise"], r["role"])
        if key not in here or str(here[key].get("date", "")) <= str(r.get("date", "")):
            here[key] = r
    return _write(here, where)
