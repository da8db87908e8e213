"""Every estimate the course states comes from hetlab.arithmetic.estimates, and says so.

A stated estimate is written ``FIGURE <!-- estimate: NAME -->`` in the README, the docs and the
notebooks' markdown; the figure right before the marker must be ``FIGURES[NAME].text``. Pure: reads files.
"""
import json
import re
from pathlib import Path

from hetlab.arithmetic import estimates
from hetlab.store import measured

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- estimate: ([a-z0-9_]+) -->")


def stated(root: Path = ROOT) -> dict[str, str]:
    """Each file that states estimates → its text (notebooks: their markdown cells)."""
    texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8")
             for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]}
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts[str(nb.relative_to(root))] = "\n".join("".join(c["source"]) for c in cells
                                                     if c["cell_type"] == "markdown")
    return {name: text for name, text in texts.items() if MARKER.search(text)}


def mismatches(name: str, text: str) -> list[str]:
    """Markers whose figure, right before them, is not the estimate they name."""
    wrong = []
    for m in MARKER.finditer(text):
        figure = estimates.FIGURES.get(m.group(1))
        if figure is None:
            wrong.append(f"{name}: unknown estimate {m.group(1)!r}")
        elif not text[:m.start()].rstrip().endswith(figure.text):
            line = text[:m.start()].rsplit("\n", 1)[-1][-60:]
            wrong.append(f"{name}: {m.group(1)} should read {figure.text!r}, reads …{line!r}")
    return wrong


def test_every_stated_estimate_is_the_one_in_estimates():
    files = stated()
    assert "README.md" in files and "docs/reference-figures.md" in files
    assert [n for n in files if n.startswith("notebooks/")], "no notebook states an estimate"
    assert not [w for name, text in files.items() for w in mismatches(name, text)]


def test_a_figure_changed_by_hand_is_caught():
    text = stated()["README.md"]
    figure = estimates.FIGURES["search_gain"].text
    assert figure + " <!-- estimate: search_gain -->" in text
    doctored = text.replace(figure + " <!-- estimate: search_gain -->", "about 1.1–1.2 <!-- estimate: search_gain -->")
    assert mismatches("README.md", doctored) and not mismatches("README.md", text)


def test_every_estimate_is_stated_somewhere_and_says_how():
    used = {m for text in stated().values() for m in MARKER.findall(text)}
    assert set(estimates.FIGURES) <= used, f"estimates never stated: {set(estimates.FIGURES) - used}"
    assert all(f.how.startswith(("estimated", "exact")) for f in estimates.FIGURES.values())


def test_the_planner_reads_the_same_step_lines(tmp_path):
    for role in ("desktop", "mac"):
        line = measured.step_time(role, "small", tmp_path)   # no file of notebook 02's there: the estimate
        step = estimates.STEP["small"][role]
        assert (line.fixed_s, line.per_sample_s) == (step.fixed_s, step.per_sample_s)
        assert estimates.FIGURES[f"{role}_line"].text == step.formula   # the course writes StepTime's own text


def test_no_estimate_contradicts_the_measured_anchor():
    """A 4070 Ti is no faster than the H100 was in the same loop; an M2 slower than both."""
    for batch, h100 in estimates.H100_TRAIN.items():
        assert estimates.estimated_samples_per_s("mac", batch) < estimates.estimated_samples_per_s("desktop", batch) <= h100
