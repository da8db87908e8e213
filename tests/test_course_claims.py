"""Claims the course makes that were once wrong (issue 70, item 5): each check reads the text a learner
reads (README, docs, notebooks, hetlab's printed lines) for the corrected claim, and where the claim is
about the installed software, checks it against that software. No Ray started, no notebook run."""
import json
import re
from pathlib import Path

import ray

from hetlab.cluster import raylog

ROOT = Path(__file__).resolve().parents[1]


def markdown(name: str) -> list[str]:
    path = next((ROOT / "notebooks").glob(f"{name}_*.ipynb"))
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def test_token_auth_is_said_to_be_a_local_default_since_2_59_not_2_52():
    """Ray's docs: token auth came in 2.52, off by default; 2.59 turned it on for local clusters."""
    places = [ROOT / "README.md", ROOT / "docs" / "troubleshooting.md", ROOT / "hetlab" / "cluster" / "raylog.py"]
    for path in places:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(default|since) (since )?(Ray )?2\.52", text), f"{path.name}: says 2.52 turned it on"
    assert "since 2.59" in raylog.NOTICE
    assert version(ray.__version__) >= (2, 59), "the notice explains a default this Ray does not have"


def test_01_labels_the_desktop_cards_bottleneck_an_estimate():
    for cell in markdown("01"):
        if "bottleneck" in cell and ("4070" in cell or "desktop card" in cell):
            assert "estimated" in cell, cell


def test_02_asks_no_one_to_carry_the_macs_file():
    text = "\n".join(markdown("02"))
    assert "you carry nothing" in text
    assert not re.search(r"(?i)copy the mac's .*mac\.json", text)


def test_00_says_which_machine_is_the_head_before_its_question_asks():
    cells = markdown("00")
    lesson = "\n".join(c for c in cells if not c.startswith("## Questions"))
    assert "Which machine of the pair is Ray's head" in "\n".join(cells)
    assert re.search(r"desktop is Ray's \*\*head\*\*", lesson) and "Linux" in lesson


def test_the_grading_page_asks_for_what_report_check_counts(tmp_path, monkeypatch):
    """A pass on the desktop alone is a pass for ``hetlab report --check``; the page says the same."""
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))   # where the guesses below are kept
    from hetlab.course.exercises import EXERCISES
    from hetlab.course.grading import RIGHT
    from hetlab.store import measured
    from hetlab.views import report

    for name, ex in EXERCISES.items():
        measured.save_graded(name, ex.notebook, RIGHT, "right", role="desktop", where=tmp_path)
    assert not [line for line in report.missing("", tmp_path) if line.startswith("exercise not passed")]
    page = (ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    assert "the Mac's notebook 02\n  grader" not in page and "notebook 02 grader" not in page.replace("\n  ", " ")
    assert f"All {len(EXERCISES)} exercises passed, each on any machine" in page
    assert f"| {report.SECTIONS.index('The exercises') + 1} · The exercises | {len(EXERCISES)} passed |" in page
    measured.save_graded("samples_per_s", "02", "wrong", "not yet", role="desktop", where=tmp_path)
    assert "exercise not passed: samples_per_s (notebook 02)" in report.missing("", tmp_path)
    from hetlab.course import guesses   # every "Predict first" guess typed: the page asks it, --check counts it
    assert "Every \"Predict first\" guess typed" in page and "lists each question still without one" in page
    assert len([line for line in report.missing("", tmp_path) if line.startswith("no guess typed")]) == len(guesses.QUESTIONS)
    for name in guesses.QUESTIONS:
        guesses.guess(name, 1)
    assert not [line for line in report.missing("", tmp_path) if line.startswith("no guess typed")]


def test_08_measures_the_link_before_the_planner_and_says_what_losing_the_mac_is():
    cells = markdown("08")
    link = next(i for i, c in enumerate(cells) if c.startswith("### Your link"))
    planner = next(i for i, c in enumerate(cells) if c.startswith("## 5 · The planner"))
    assert link < planner and "assumed" in cells[planner]
    first = next(c for c in cells if c.startswith("## 1 ·"))
    assert "kills only the Mac's worker process" in first and "not from a lost machine" in first


def test_09_labels_its_predictions_assumption():
    cell = next(c for c in markdown("09") if "steptime.independent_gain" in c)
    assert "one trial per machine at batch 64" in cell and "32–128" in cell
