"""Both machines on the same code (notebook 04): a Ray worker runs its own machine's hetlab, so
``hetlab.cluster.connect`` runs ``code_here`` on every node and refuses a ``mismatch`` in one line.
Standard library only, and Ray sends this module by value: a node on any hetlab can answer.
"""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(folder) -> str | None:
    """``git rev-parse --short HEAD`` in ``folder``, or None (no git checkout, or no answer in 5 s)."""
    if not (Path(folder) / ".git").exists():  # a folder, or a file in a git worktree
        return None
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() if out.returncode == 0 else "") or None


def code_here() -> dict:
    """The hetlab this process imports: ``{"hetlab": its version (None: none), "commit": short or None}``."""
    try:
        import hetlab
    except ImportError:
        return {"hetlab": None, "commit": None}
    return {"hetlab": getattr(hetlab, "__version__", "?"),
            "commit": git_commit(Path(hetlab.__file__).resolve().parents[1])}


def mismatch(here: str, mine: dict, nodes: dict) -> str | None:
    """One line when a machine (``nodes``: its name → its ``code_here()``) runs another hetlab than
    ``mine``, the one on ``here``, else None; without both commits the versions alone are compared."""
    for name, theirs in nodes.items():
        both = bool(mine["commit"] and theirs["commit"])
        if theirs["hetlab"] == mine["hetlab"] and (not both or theirs["commit"] == mine["commit"]):
            continue
        if theirs["hetlab"] is None:
            return (f"{name} cannot import hetlab, {here} runs {_code(mine)}: install it there "
                    f"(clone the course, `pip install -e .`), then connect again.")
        version = "" if theirs["hetlab"] == mine["hetlab"] else f"hetlab {mine['hetlab']}"
        commit = f"at {mine['commit']}" if mine["commit"] else ""
        line = f"{name} runs {_code(theirs)}, {here} {' '.join(x for x in (version, commit) if x)}"
        to = f" (to match {here}: `git checkout {mine['commit']}`)" if mine["commit"] else ""
        return f"{line}: on {name} run `git pull` in hetlab's folder{to}, then connect again."
    return None


def _code(code: dict) -> str:
    return f"hetlab {code['hetlab']}" + (f" at {code['commit']}" if code["commit"] else "")
