"""Every notebook ends with 2–4 exercises, each followed by a solution the learner reveals with a
click (its source collapsed in JupyterLab) and that the notebook tests run: it asserts what the
exercise says to expect (issue 12). Reads the notebooks' JSON only; nothing is executed."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0[0-9]_*.ipynb"))


def cells_of(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def text(cell):
    return "".join(cell["source"])


def is_solution(cell):
    return "solution" in cell.get("metadata", {}).get("tags", [])


def test_every_notebook_00_to_09_is_checked():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(10)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_with_hidden_solutions_that_assert(path):
    cells = cells_of(path)
    at = [i for i, c in enumerate(cells) if is_solution(c)]
    assert 2 <= len(at) <= 4, f"{path.name}: {len(at)} solution cells, want 2 to 4"
    summary = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "## Summary" in text(c))
    for n, i in enumerate(at, 1):
        cell, before = cells[i], cells[i - 1]
        assert cell["cell_type"] == "code", f"{path.name} cell {i}: a solution is a code cell"
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, \
            f"{path.name} cell {i}: the solution's source must be hidden until the learner reveals it"
        assert text(cell).startswith("# Solution (click to reveal)"), f"{path.name} cell {i}"
        assert "assert " in text(cell), f"{path.name} cell {i}: a solution checks what its exercise claims"
        assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name} cell {i}: outputs stripped"
        assert before["cell_type"] == "markdown" and text(before).startswith(f"### Exercise {n} · "), \
            f"{path.name} cell {i}: a solution follows its exercise, '### Exercise {n} · <title>'"
        assert i < summary, f"{path.name}: the exercises come before the summary"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cell_ids_are_unique(path):
    ids = [c["id"] for c in cells_of(path)]
    assert len(ids) == len(set(ids))
