"""``hetlab update``: a new version of the course, your exercise code still in the notebooks you open (README, "Day two").

Your exercises live in the course's notebooks, which git tracks and JupyterLab saves as you go, so a
plain ``git pull`` refuses. ``update`` copies each notebook you changed to ``NN_topic.yours-DATE.ipynb``
(git ignores these), puts the course's version back, pulls, then carries your cells into the new
version by cell id (``carry``): your edits, and the cells you inserted, after the course's cell before
them. A cell the course changed too keeps the course's version, yours right after it. One line each.
"""
from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from pathlib import Path

from hetlab.errors import HetlabError

KEPT = ".yours-"   # notebooks/NN_topic.yours-2026-11-28-0930.ipynb (.gitignore: notebooks/*.yours-*.ipynb)


def _git(checkout: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise HetlabError(f"git {' '.join(args)} failed: {' '.join((done.stderr or done.stdout).split())[:240]}")
    return done.stdout


def changed_notebooks(checkout: Path) -> list[Path]:
    """The course's notebooks you changed (tracked, modified since the last commit)."""
    out = _git(checkout, "status", "--porcelain", "--", "notebooks/*.ipynb")
    return [checkout / line[3:].strip() for line in out.splitlines() if line[:2].strip() == "M"]


def _source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def carry(base: dict, yours: dict, new: dict) -> tuple[dict, list[str]]:
    """Your cells carried into the course's ``new`` version of a notebook, by cell id: ``base`` is the
    version you started from. Returns the notebook and one line per cell the course changed too (kept
    both, yours after) or removed (yours kept where it was). Cells you did not touch are the course's."""
    before = {c["id"]: _source(c) for c in base["cells"] if "id" in c}
    merged = [dict(c) for c in new["cells"]]
    where = {c.get("id"): i for i, c in enumerate(merged)}
    notes, anchor, taken = [], -1, set(where) - {None}   # anchor: the merged index your next cell goes after
    for cell in yours["cells"]:
        cid = cell.get("id")
        if cid in before and _source(cell) == before[cid]:       # untouched by you: the course's stands
            anchor = where.get(cid, anchor)
            continue
        if cid in before and cid in where and _source(merged[where[cid]]) == before[cid]:
            merged[where[cid]] = cell                              # yours, and the course left it alone
            anchor = where[cid]
            continue
        if cid in before:
            notes.append(f"cell {cid} changed in the course too: the course's is first, yours right after it"
                         if cid in where else f"cell {cid} is gone from the course: yours stays where it was")
        if cid in where and cid in before:
            anchor = where[cid]
        mine = dict(cell)
        if mine.get("id") in taken:                                # two cells may not share an id
            mine["id"] = f"{cid}-yours"[:64]
        taken.add(mine.get("id"))
        merged.insert(anchor + 1, mine)
        anchor += 1
        where = {c.get("id"): i for i, c in enumerate(merged)}
    return {**new, "cells": merged}, notes


def _read(text: str) -> dict:
    notebook = json.loads(text)
    if not all("id" in c for c in notebook.get("cells", [])):
        raise ValueError("cells without ids (nbformat before 4.5)")
    return notebook


def _write(path: Path, notebook: dict) -> None:
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def update(checkout: str | Path = ".", now: datetime.datetime | None = None, commit: str | None = None) -> dict:
    """Set your changed notebooks aside, ``git pull --ff-only`` (or, with ``commit``, fetch and move this
    branch to that commit: the Mac of a Windows desktop), then carry your cells into the new versions.

    Returns ``{"kept", "carried", "notes", "before", "after", "branch"}``; one HetlabError when git
    fails, after your notebooks are back as they were.
    """
    top = _git(Path(checkout), "rev-parse", "--show-toplevel").strip()
    checkout = Path(top)
    if not (checkout / "hetlab" / "__init__.py").is_file():
        raise HetlabError(f"{checkout} is not the course's checkout: run `hetlab update` in ~/hetlab.")
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d-%H%M")
    before = _git(checkout, "rev-parse", "--short", "HEAD").strip()
    kept, bases = [], {}
    for notebook in changed_notebooks(checkout):
        copy = notebook.with_name(f"{notebook.stem}{KEPT}{stamp}.ipynb")
        shutil.copy2(notebook, copy)
        kept.append(copy)
        bases[notebook] = _git(checkout, "show", f"HEAD:{notebook.relative_to(checkout).as_posix()}")
    if kept:
        _git(checkout, "checkout", "--", *[str(n) for n in bases])
    try:
        branch = _on_a_branch(checkout)
        if commit:
            _git(checkout, "fetch", "--quiet")
            _git(checkout, "reset", "--keep", _git(checkout, "rev-parse", "--verify", f"{commit}^{{commit}}").strip())
        else:
            _git(checkout, "pull", "--ff-only")
    except HetlabError as exc:
        for notebook, copy in zip(bases, kept):
            shutil.copy2(copy, notebook)
        raise HetlabError(f"{exc} — your notebooks are as they were; nothing changed.") from None
    carried, notes = [], []
    for notebook, copy in zip(bases, kept):
        name = notebook.name
        if not notebook.exists():
            notes.append(f"{name} is gone from the course: your version is in {copy.name}")
            continue
        try:
            merged, said = carry(_read(bases[notebook]), _read(copy.read_text(encoding="utf-8")),
                                 _read(notebook.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            notes.append(f"{name}: your cells were not carried ({str(exc)[:80]}): they are in {copy.name}")
            continue
        _write(notebook, merged)
        carried.append(str(notebook.relative_to(checkout)))
        notes += [f"{name}: {line}" for line in said]
    return {"kept": [str(k.relative_to(checkout)) for k in kept], "carried": carried, "notes": notes,
            "before": before, "after": _git(checkout, "rev-parse", "--short", "HEAD").strip(), "branch": branch}


def _on_a_branch(checkout: Path) -> str | None:
    """A checkout on a bare commit (``git checkout COMMIT``: a detached HEAD, which no pull can move) is
    put on its remote's default branch at that commit. Returns the branch's name when it did that."""
    if _git(checkout, "symbolic-ref", "-q", "HEAD", check=False).strip():
        return None
    remote = _git(checkout, "rev-parse", "--abbrev-ref", "origin/HEAD", check=False).strip() or "origin/main"
    branch = remote.split("/", 1)[1]
    _git(checkout, "checkout", "-q", "-B", branch)
    _git(checkout, "branch", "-q", f"--set-upstream-to={remote}")
    return branch
