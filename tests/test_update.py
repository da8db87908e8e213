"""`hetlab update`: a new version of the course, the learner's exercise code in the notebook they open
(README, "Day two").

Real git, in a temporary folder: a course repository, a learner's clone (``~/hetlab`` of a home made
here) with an exercise answered and a cell of their own inserted, then a new commit of the course that
changes the same notebook. The update runs as the README's line, in a shell.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetlab.errors import HetlabError
from hetlab.tools import update as updating
from harness.rehearsal.learner import readme_blocks

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def git(where, *args):
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=course", "-c", "user.email=c@example.invalid",
                           *args], capture_output=True, text=True, timeout=60)


def cell(cid, text, kind="code"):
    return {"cell_type": kind, "id": cid, "metadata": {}, "source": [text],
            **({"outputs": [], "execution_count": None} if kind == "code" else {})}


def notebook(*cells):
    return json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def sources(path):
    return [(c["id"], "".join(c["source"])) for c in json.loads(path.read_text())["cells"]]


V1 = [cell("intro", "# 05", "markdown"), cell("ex1", "# your code here"), cell("check", "check(v1)")]


@pytest.fixture
def course(tmp_path):
    origin = tmp_path / "course"
    (origin / "hetlab").mkdir(parents=True)
    (origin / "notebooks").mkdir()
    (origin / "hetlab" / "__init__.py").write_text("")
    (origin / "notebooks" / "05_ps.ipynb").write_text(notebook(*V1))
    (origin / ".gitignore").write_text("notebooks/*.yours-*.ipynb\n")
    assert git(origin, "init", "-q", "-b", "main").returncode == 0
    git(origin, "add", "-A")
    assert git(origin, "commit", "-qm", "v1").returncode == 0
    learner = tmp_path / "home" / "hetlab"
    assert subprocess.run(["git", "clone", "-q", str(origin), str(learner)], timeout=60).returncode == 0
    mine = [V1[0], cell("ex1", "answer = 42"), cell("own", "my own try"), V1[2]]   # JupyterLab saved it
    (learner / "notebooks" / "05_ps.ipynb").write_text(notebook(*mine))
    return origin, learner


def publish(origin, *cells, message="v2"):
    (origin / "notebooks" / "05_ps.ipynb").write_text(notebook(*cells))
    assert git(origin, "commit", "-qam", message).returncode == 0
    return git(origin, "rev-parse", "--short", "HEAD").stdout.strip()


def readme_update(learner):
    """The README's update line, as the learner pastes it: in a shell, from their home."""
    [line] = [b["code"] for b in readme_blocks(README) if "hetlab update" in b["code"] and b["hosts"]]
    env = {**os.environ, "HOME": str(learner.parent), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120)


def test_the_readmes_update_line_carries_the_answer_and_the_own_cell_into_the_new_version(course):
    origin, learner = course
    after = publish(origin, V1[0], V1[1], cell("check", "check(v2)"), cell("new", "the course's new cell"))
    plain = learner.parent / "plain"
    shutil.copytree(learner, plain)
    refused = git(plain, "pull", "--ff-only")
    assert refused.returncode != 0 and "overwritten" in refused.stderr       # why a plain pull is not the line

    done = readme_update(learner)
    assert done.returncode == 0, done.stderr
    assert sources(learner / "notebooks" / "05_ps.ipynb") == [
        ("intro", "# 05"), ("ex1", "answer = 42"), ("own", "my own try"),    # the answer, the own cell after it
        ("check", "check(v2)"), ("new", "the course's new cell")]           # and the course's change
    lines = done.stdout.splitlines()
    assert lines[0].startswith("kept a copy of your work as it was: notebooks/05_ps.yours-")
    assert lines[1:] == ["your cells are in the new notebooks/05_ps.ipynb: open it as before",
                         f"the course: {lines[-1].split()[2]} → {after}; both machines must print the same commit"]
    copy = learner / lines[0].split(": ")[1]
    assert ("ex1", "answer = 42") in sources(copy)                                      # as it was, beside it
    assert git(learner, "status", "--porcelain").stdout.strip() == "M notebooks/05_ps.ipynb"   # yours, tracked


def test_a_cell_the_course_changed_too_keeps_both_and_says_so(course):
    origin, learner = course
    publish(origin, V1[0], cell("ex1", "# your code here (hint: 6 × 7)"), V1[2])
    done = updating.update(learner)
    assert sources(learner / "notebooks" / "05_ps.ipynb") == [
        ("intro", "# 05"), ("ex1", "# your code here (hint: 6 × 7)"), ("ex1-yours", "answer = 42"),
        ("own", "my own try"), ("check", "check(v1)")]
    assert done["notes"] == ["05_ps.ipynb: cell ex1 changed in the course too: the course's is first, "
                             "yours right after it"]


def test_the_mac_of_a_windows_desktop_goes_to_the_desktops_commit_and_stays_on_its_branch(course):
    """README §3: the Mac gets the course where the desktop did, then the desktop's commit. The old way,
    `git checkout COMMIT`, left no branch and the next `git pull --ff-only` failed."""
    origin, learner = course
    desktops = publish(origin, *V1[:2], cell("check", "check(v2)"))
    newest = publish(origin, *V1[:2], cell("check", "check(v3)"), message="v3")
    old_way = learner.parent / "old"
    shutil.copytree(learner, old_way)
    git(old_way, "checkout", "-q", "--", "notebooks")
    git(old_way, "fetch", "-q")
    assert git(old_way, "checkout", "-q", desktops).returncode == 0
    assert "not currently on a branch" in git(old_way, "pull", "--ff-only").stderr      # the old README's trap

    done = updating.update(learner, commit=desktops)
    assert done["after"] == desktops and git(learner, "symbolic-ref", "--short", "HEAD").stdout.strip() == "main"
    assert ("ex1", "answer = 42") in sources(learner / "notebooks" / "05_ps.ipynb")
    assert updating.update(learner)["after"] == newest                                 # the next update moves it
    moved = updating.update(old_way)                                                    # and the old way's checkout
    assert moved["branch"] == "main" and moved["after"] == newest


def test_a_failed_pull_puts_the_learners_notebook_back(course):
    origin, learner = course
    shutil.rmtree(origin)                                     # the desktop is not there: the pull fails
    with pytest.raises(HetlabError) as err:
        updating.update(learner)
    assert "nothing changed" in str(err.value) and "\n" not in str(err.value)
    assert ("ex1", "answer = 42") in sources(learner / "notebooks" / "05_ps.ipynb")


def test_outside_the_course_it_says_where_to_run_it(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(HetlabError, match="not the course's checkout"):
        updating.update(tmp_path)


def test_the_readme_says_what_the_update_does_and_no_bare_checkout():
    day_two = README[README.index("## 7 · Day two"):]
    assert "hetlab update --commit" in README and not re.search(r"`git checkout` the desktop's commit", README)
    assert "carried" in day_two or "carries" in day_two
