"""Every notebook is a lesson for a learner at their own machines (issue 28): at most 1,700 words of
prose, 5–8 questions at the end with answers on a linked page, one link to the reference figures,
and no word of this project's test set-up in its markdown or code comments. Reads JSON only."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_WORDS = 1700   # issue 70: a lesson, reached by cutting sections

# Words about how this project is tested, not about the learner's machines.
SET_UP_WORDS = [r"\b2-core\b", r"\btwo-core\b", r"\bmake test\b", r"\bnbval\b", r"\bCI\b",
                r"\b20\d\d-\d\d-\d\d\b", r"\bthis box\b", r"\bpytest\b"]
# The project's own tester, in any cell, code included (issue 37): its rehearsal of the pair, and
# branches that ask whether a test runs the notebook. A notebook may say the Mac is simulated.
TESTER_WORDS = [r"(?i)\brehears", r"\bis_test_run\b", r"(?i)\bautomated run"]


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def prose(path: Path) -> str:
    return "\n".join(source(c) for c in cells_of(path) if c["cell_type"] == "markdown")


def comments(path: Path) -> str:
    """The ``#`` comments of the code cells (a ``#`` inside a string counts too: it is read)."""
    return "\n".join(line[line.index("#"):] for c in cells_of(path) if c["cell_type"] == "code"
                     for line in source(c).splitlines() if "#" in line)


def words(text: str) -> int:
    return len(text.split())


def questions_cell(path: Path) -> str:
    found = [source(c) for c in cells_of(path)
             if c["cell_type"] == "markdown" and re.search(r"^##+ Questions", source(c), re.M)]
    assert len(found) == 1, f"{path.name}: want one markdown cell headed '## Questions', found {len(found)}"
    return found[0]


def test_the_course_is_here():
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_fits_a_lesson(path):
    n = words(prose(path))
    assert n <= MAX_WORDS, f"{path.name}: {n} words of prose, at most {MAX_WORDS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_word_of_the_test_set_up(path):
    text = prose(path) + "\n" + comments(path)
    hits = [m.group(0) for w in SET_UP_WORDS for m in re.finditer(w, text)]
    assert not hits, f"{path.name}: test set-up words in the lesson: {sorted(set(hits))}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_tester_in_the_learners_path(path):
    text = "\n".join(source(c) for c in cells_of(path))
    hits = [m.group(0) for w in TESTER_WORDS for m in re.finditer(w, text)]
    assert not hits, f"{path.name}: the tester in the lesson (code or prose): {sorted(set(hits))}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_questions_with_answers_on_a_linked_page(path):
    cell = questions_cell(path)
    items = re.findall(r"^\s*\d+\.\s", cell, re.M)
    assert 5 <= len(items) <= 8, f"{path.name}: {len(items)} numbered questions, want 5 to 8"
    answers = ROOT / "docs" / "answers" / f"{path.stem}.md"
    assert answers.exists(), f"{path.name}: no answers page {answers.relative_to(ROOT)}"
    assert f"docs/answers/{path.stem}.md" in cell, f"{path.name}: the questions must link their answers page"
    answered = re.findall(r"^\s*\d+\.\s", answers.read_text(encoding="utf-8"), re.M)
    assert len(answered) == len(items), f"{answers.name}: {len(answered)} answers for {len(items)} questions"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_reference_figures_linked_once(path):
    assert prose(path).count("docs/reference-figures.md") == 1, \
        f"{path.name}: link docs/reference-figures.md once (measured figures live there, not here)"


def test_the_check_catches_set_up_words():
    text = "Measured on the 2-core box on 2026-11-25; make test runs it through nbval in CI."
    hits = {m.group(0) for w in SET_UP_WORDS for m in re.finditer(w, text)}
    assert hits == {"2-core", "2026-11-25", "make test", "nbval", "CI"}
    assert not [w for w in SET_UP_WORDS if re.search(w, "Circle a CIFAR run; a ci-like name; 3.11.7")]
    text = "On the Rehearsal; `hetlab rehearse`; if hetlab.is_test_run(): # an automated run"
    assert {m.group(0) for w in TESTER_WORDS for m in re.finditer(w, text)} == \
        {"Rehears", "rehears", "is_test_run", "automated run"}
    assert not [w for w in TESTER_WORDS if re.search(w, "on the practice cluster the Mac is simulated")]


# --- the README (issue 70): a course page, not a manual --------------------------------------------

README = ROOT / "README.md"
README_MAX_WORDS = 2500
LABELS = {"desktop": "desktop", "mac": "Mac", "python": "Python"}


def readme_prose(text: str) -> str:
    """The README's prose: without its fenced blocks and its HTML comments (the blocks' marks)."""
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def test_the_readme_fits_a_course_page():
    n = words(readme_prose(README.read_text(encoding="utf-8")))
    assert n <= README_MAX_WORDS, f"README.md: {n} words of prose, at most {README_MAX_WORDS}"


def test_the_count_leaves_out_blocks_and_marks_only():
    text = "two words\n<!-- runs on: mac -->\n```bash\nray stop --force\n```\nthree more words\n"
    assert words(readme_prose(text)) == 5


def test_every_readme_block_names_its_machine_in_visible_text():
    """The `<!-- runs on -->` marks are invisible where the README is rendered: the line above each says it."""
    from harness.rehearsal import learner
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    blocks = learner.readme_blocks(text)
    assert blocks
    for b in blocks:
        label = lines[b["line"] - 3]                    # the fence, its mark, then the visible label
        assert label.startswith("**") and "<!--" not in label, f"README line {b['line']}: no visible label"
        for machine in b["hosts"] or b["machines"]:
            assert LABELS[machine] in label, f"README line {b['line']}: {label!r} does not name {machine}"


def test_the_readme_makes_an_ssh_key_before_the_macs_clone():
    text = " ".join(README.read_text(encoding="utf-8").split())
    clone = text.index("git clone \"ssh://")
    for step in ("ssh-keygen -t ed25519", "ssh-copy-id DESKTOP_USER@DESKTOP_IP", "Are you sure you want to continue"):
        assert -1 < text.find(step) < clone, step
