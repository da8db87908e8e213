"""`hetlab update`: a new version of the course keeps the notebooks the learner changed (README, "Day two").

Real git, in a temporary folder: a course repository, a learner's clone with an edited notebook,
then a new commit of the course that changes the same notebook.
"""
import json
import shutil
import subprocess

import pytest

from hetlab.errors import HetlabError
from hetlab.tools.cli import update as updating


def git(where, *args):
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=course", "-c", "user.email=c@example.invalid",
                           *args], capture_output=True, text=True, timeout=60)


def notebook(text):
    return json.dumps({"cells": [{"cell_type": "code", "source": [text]}]})


@pytest.fixture
def course(tmp_path):
    origin = tmp_path / "course"
    (origin / "hetlab").mkdir(parents=True)
    (origin / "notebooks").mkdir()
    (origin / "hetlab" / "__init__.py").write_text("")
    (origin / "notebooks" / "05_ps.ipynb").write_text(notebook("course v1"))
    (origin / ".gitignore").write_text("notebooks/*.yours-*.ipynb\n")
    assert git(origin, "init", "-q", "-b", "main").returncode == 0
    git(origin, "add", "-A")
    assert git(origin, "commit", "-qm", "v1").returncode == 0
    learner = tmp_path / "hetlab"
    assert subprocess.run(["git", "clone", "-q", str(origin), str(learner)], timeout=60).returncode == 0
    (learner / "notebooks" / "05_ps.ipynb").write_text(notebook("my answer"))      # JupyterLab saved it
    (origin / "notebooks" / "05_ps.ipynb").write_text(notebook("course v2"))       # the course changes it too
    git(origin, "commit", "-qam", "v2")
    return origin, learner


def test_a_plain_pull_refuses_and_update_keeps_the_learners_work(course):
    origin, learner = course
    plain = learner.parent / "plain"
    shutil.copytree(learner, plain)
    refused = git(plain, "pull", "--ff-only")
    assert refused.returncode != 0 and "overwritten" in refused.stderr       # why the README's old line broke

    done = updating.update(learner)
    kept = learner / done["kept"][0]
    assert kept.name.startswith("05_ps.yours-") and "my answer" in kept.read_text()          # nothing lost
    assert "course v2" in (learner / "notebooks" / "05_ps.ipynb").read_text()                 # the new course
    assert done["after"] == git(origin, "rev-parse", "--short", "HEAD").stdout.strip() != done["before"]
    assert git(learner, "status", "--porcelain").stdout == ""                                 # git ignores the copy


def test_a_failed_pull_puts_the_learners_notebook_back(course):
    origin, learner = course
    shutil.rmtree(origin)                                     # the desktop is not there: the pull fails
    with pytest.raises(HetlabError) as err:
        updating.update(learner)
    assert "nothing changed" in str(err.value) and "\n" not in str(err.value)
    assert "my answer" in (learner / "notebooks" / "05_ps.ipynb").read_text()


def test_outside_the_course_it_says_where_to_run_it(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(HetlabError, match="not the course's checkout"):
        updating.update(tmp_path)
