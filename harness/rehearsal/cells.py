"""A notebook run as the learner runs it, on the rehearsal's desktop host (tests/test_rehearsal.py).

``notebook`` starts it cell by cell inside the desktop host's network namespace, writing each code
cell's output as the cell ends, so a test can act while it runs (``wait_for_cell``, ``cells_so_far``);
``through`` stops after one cell, ``hold`` waits before the first cell with a tag (``held``).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hetlab.errors import HetlabError
from harness.rehearsal.hosts import DESKTOP, inside


def notebook(path: Path, out: Path, env: dict, cwd: Path, timeout: float = 900, hold: str = "",
             through: str | None = None) -> subprocess.Popen:
    """Start running the notebook ``path`` cell by cell in the desktop host; each code cell's output
    is appended to ``out`` (one JSON line: index, id, tags, text, error) as soon as the cell ends.
    ``hold``: before the first cell with that tag, wait while ``held(out, hold)`` exists (``held`` makes it).
    ``through``: the id of the last cell to run (None: every cell)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    if hold:
        held(out, hold).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "harness.rehearsal.cells", str(path), str(out), str(timeout), hold,
            through or ""]
    return subprocess.Popen(inside(DESKTOP, argv), env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def held(out: Path, tag: str) -> Path:
    """The file that exists while ``notebook(..., hold=tag)`` waits before its first cell tagged ``tag``
    (e.g. ``"solution"``: what a learner who opened no solution has when the lesson ends); remove it to go on."""
    return out.with_name(f"{out.name}.held-{tag}")


def cells_so_far(out: Path) -> list[dict]:
    """The cells that have finished, in order (``notebook``'s file)."""
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []


def wait_for_cell(out: Path, tag: str, runner: subprocess.Popen, timeout: float = 600) -> dict:
    """The finished cell tagged ``tag``: its output text (a failed cell or a stopped run: one error)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        cells = cells_so_far(out)
        bad = [c for c in cells if c["error"]]
        if bad:
            raise HetlabError(f"rehearsal: notebook cell {bad[0]['index']} failed: {bad[0]['error'][-600:]}")
        mine = [c for c in cells if tag in c["tags"]]
        if mine:
            return mine[0]
        if runner.poll() is not None:
            raise HetlabError(f"rehearsal: the notebook stopped before its {tag!r} cell: {runner.stdout.read()[-600:]}")
        time.sleep(0.5)
    raise HetlabError(f"rehearsal: no {tag!r} cell within {timeout:.0f} s")


def _run_cells(path: str, out: str, timeout: str, hold: str = "", through: str = "") -> int:
    """``python -m harness.rehearsal.cells NOTEBOOK OUT TIMEOUT [TAG [LAST_CELL_ID]]`` (inside the desktop host)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    if through and through not in [cell.get("id") for cell in nb.cells if cell.cell_type == "code"]:
        raise SystemExit(f"rehearsal: {path} has no code cell {through!r} to stop after")
    client = NotebookClient(nb, timeout=float(timeout), kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    with client.setup_kernel(), open(out, "a") as sink:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if hold and hold in cell.metadata.get("tags", []):
                _wait_while(held(Path(out), hold), float(timeout))
                hold = ""
            error = ""
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as exc:
                error = str(exc)
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            sink.write(json.dumps({"index": index, "id": cell.get("id"), "tags": cell.metadata.get("tags", []),
                                   "text": text, "error": error}) + "\n")
            sink.flush()
            if error:
                return 1
            if cell.get("id") == through:
                break
    return 0


def _wait_while(gate: Path, timeout: float) -> None:
    """Make ``gate`` and wait until someone removes it (or ``timeout`` seconds)."""
    gate.write_text("")
    deadline = time.time() + timeout
    while gate.exists() and time.time() < deadline:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(_run_cells(*sys.argv[1:6]))
