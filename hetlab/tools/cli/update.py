"""``hetlab update``: a new version of the course without losing your work (README, "Day two").

Your exercises live in the course's notebooks, which git tracks and JupyterLab saves as you go, so a
plain ``git pull`` refuses ("local changes would be overwritten"). ``update`` first copies every
notebook you changed beside it, as ``NN_topic.yours-DATE.ipynb`` (git ignores these), puts the
course's version back, then pulls. If the pull fails, your versions go back in place: nothing is lost.
"""
from __future__ import annotations

import datetime
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


def update(checkout: str | Path = ".", now: datetime.datetime | None = None) -> dict:
    """Keep your changed notebooks beside the course's, then ``git pull --ff-only``.

    Returns ``{"kept": [paths], "before": commit, "after": commit}``; one HetlabError when the pull
    fails, after your notebooks are back as they were.
    """
    top = _git(Path(checkout), "rev-parse", "--show-toplevel").strip()
    checkout = Path(top)
    if not (checkout / "hetlab" / "__init__.py").is_file():
        raise HetlabError(f"{checkout} is not the course's checkout: run `hetlab update` in ~/hetlab.")
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d-%H%M")
    before = _git(checkout, "rev-parse", "--short", "HEAD").strip()
    kept = []
    for notebook in changed_notebooks(checkout):
        copy = notebook.with_name(f"{notebook.stem}{KEPT}{stamp}.ipynb")
        shutil.copy2(notebook, copy)
        kept.append(copy)
    if kept:
        _git(checkout, "checkout", "--", *[str(k.with_name(k.name.split(KEPT)[0] + ".ipynb")) for k in kept])
    try:
        _git(checkout, "pull", "--ff-only")
    except HetlabError as exc:
        for copy in kept:
            shutil.copy2(copy, copy.with_name(copy.name.split(KEPT)[0] + ".ipynb"))
        raise HetlabError(f"{exc} — your notebooks are as they were; nothing changed.") from None
    return {"kept": [str(k.relative_to(checkout)) for k in kept], "before": before,
            "after": _git(checkout, "rev-parse", "--short", "HEAD").strip()}


def _add_update(sub) -> None:
    p = sub.add_parser("update", help="pull a new version of the course, keeping the notebooks you changed "
                       "beside it (NN_topic.yours-DATE.ipynb)")
    p.add_argument("--checkout", default=".", help="the course's folder (default: here)")
    p.set_defaults(run=_update)


def _update(args) -> int:
    done = update(args.checkout)
    for path in done["kept"]:
        print(f"kept your work: {path}")
    print(f"the course: {done['before']} → {done['after']}; both machines must print the same commit")
    return 0
