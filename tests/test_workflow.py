"""Where a course repository lives (issue 58): the CI workflow runs the README's `make test` and passes
actionlint, every committed notebook is stripped of outputs the way `make hooks`'s git filter
strips them (nbstripout), and the wheel a learner installs holds hetlab without the maintainers'
harness. Part of `make check`: files and a few small programs, nothing started."""
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "notebooks.yml"
BIN = Path(sys.executable).parent


def committed_notebooks():
    listed = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:   # not a git checkout (an unpacked archive): the course's notebooks
        return sorted((ROOT / "notebooks").glob("*.ipynb"))
    return [ROOT / p for p in listed.stdout.split()]


def actionlint(path):
    exe = shutil.which("actionlint", path=str(BIN)) or shutil.which("actionlint")
    assert exe, "actionlint is missing: pip install -e '.[test]' installs it"
    return subprocess.run([exe, "-no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_the_workflow_runs_make_test_on_push_and_weekly_and_keeps_the_durations():
    text = WORKFLOW.read_text()
    assert "make test " in text and "--durations=" in text and "ubuntu-" in text
    assert "\n  push:" in text and "schedule:" in text and "cron:" in text
    assert "actions/upload-artifact@" in text and "durations.txt" in text
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme   # the README's one command is what CI runs


def test_the_workflow_passes_actionlint_and_a_broken_one_does_not(tmp_path):
    done = actionlint(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-latest", "runs-on: ubuntu-latets"))
    assert actionlint(broken).returncode != 0   # the check can fail: an unknown runner label


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_has_no_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name} cell {i}: run make hooks"
    # and nbstripout, as `make hooks` sets it up, would change nothing (so the filter never churns a diff)
    done = subprocess.run([sys.executable, "-m", "nbstripout", "--keep-id", "--verify", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_hooks_installs_the_hook_that_strips_a_notebooks_outputs_before_a_commit(tmp_path):
    """`make hooks` writes scripts/pre-commit with this environment's Python into git's hooks folder
    (read from `make -n`: the checkout's own hooks stay as they are); the hook then runs in a new
    repository on a notebook with an output: the commit stops and the notebook is stripped."""
    done = subprocess.run(["make", "-n", "-B", "hooks", f"BIN={BIN}", "STAMP=pyproject.toml"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"sed 's|@PYTHON@|{BIN}/python|' scripts/pre-commit > " in done.stdout
    hook = tmp_path / "pre-commit"
    hook.write_text((ROOT / "scripts" / "pre-commit").read_text().replace("@PYTHON@", f"{BIN}/python"))
    hook.chmod(0o755)
    repo = tmp_path / "repo"
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True, check=True)  # noqa: E731
    repo.mkdir()
    git("init", "-q")
    clean = ROOT / "notebooks" / "00_setup_check.ipynb"
    nb = json.loads(clean.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"], cell["execution_count"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}], 1
    (repo / "n.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    git("add", "n.ipynb")
    stopped = subprocess.run([str(hook)], cwd=repo, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 1 and "n.ipynb had outputs" in stopped.stderr, stopped
    stripped = json.loads((repo / "n.ipynb").read_text(encoding="utf-8"))
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None for c in stripped["cells"])
    assert [c["id"] for c in stripped["cells"]] == [c["id"] for c in nb["cells"]]   # ids kept
    git("add", "n.ipynb")
    assert subprocess.run([str(hook)], cwd=repo, capture_output=True, timeout=60).returncode == 0


def test_the_learners_wheel_holds_hetlab_and_not_the_harness(tmp_path):
    """``pip install .`` gives a learner ``hetlab`` only: ``harness/`` (the rehearsal, the GPU machine's
    call) stays in the repository, and importing it where the wheel is installed fails. Built offline
    from a copy of the sources (setuptools from this environment), in seconds."""
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools in this environment")
    src, out, site = tmp_path / "src", tmp_path / "wheel", tmp_path / "site"
    for name in ("hetlab", "harness"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", str(src), "-w", str(out)],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = out.glob("hetlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hetlab/core/machine.py" in names and "hetlab/tools/cli.py" in names   # the package is there
    assert {n.split("/")[0] for n in names} == {"hetlab", next(n for n in names if ".dist-info/" in n).split("/")[0]}
    assert [n for n in names if n.startswith("harness/") or "rehears" in n] == []
    installed = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    probe = "import importlib.util as u; print(u.find_spec('hetlab').origin, u.find_spec('harness'))"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert found.returncode == 0, found.stderr[-2000:]
    origin, harness = found.stdout.split()
    assert origin.startswith(str(site)) and harness == "None", found.stdout
