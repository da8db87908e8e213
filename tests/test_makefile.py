"""The Makefile's own settings: JupyterLab without the news pop-up, the full-mode notebook run, the fast tier,
the environment make picks, `make test`'s two lanes and CI's gauge. File checks and `make -n`, but for one real
pytest run with two lanes and --gauge."""
import json
import re
import sys
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[1]
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_lab_settings_turn_the_news_prompt_off():
    overrides = json.loads((ROOT / "jupyter" / "settings" / "overrides.json").read_text())
    assert overrides[NOTIFICATION]["fetchNews"] == "false"   # "none" (the default) asks in a pop-up
    plugin, name = NOTIFICATION.split(":")
    schema = json.loads((Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / plugin /
                         f"{name}.json").read_text())
    assert "false" in [choice["const"] for choice in schema["properties"]["fetchNews"]["oneOf"]]
    assert set(overrides[NOTIFICATION]) <= set(schema["properties"])
    for key, values in overrides.items():   # every override names a setting JupyterLab has
        plugin, name = key.split(":")
        schema = json.loads((Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / plugin /
                             f"{name}.json").read_text())
        assert set(values) <= set(schema["properties"]), key
    # Markdown opens rendered (the answers pages a notebook links), in a viewer JupyterLab has.
    assert overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["markdown"] == "Markdown Preview"
    text = (ROOT / "Makefile").read_text()
    assert "LAB_SETTINGS := $(CURDIR)/jupyter/settings" in text
    assert "--LabApp.app_settings_dir='$(LAB_SETTINGS)'" in recipe("lab")


def test_test_full_runs_the_notebooks_in_full_mode_with_long_cell_timeouts():
    full = recipe("test-full")
    assert "HETLAB_QUICK=0" in full and "$(NOTEBOOKS)" in full and "--nbval-current-env" in full
    assert "--nbval-cell-timeout=$(CELL_TIMEOUT)" in full and "--nbval-output-timeout=" in full
    assert "test-full" not in recipe("test")


def test_check_runs_the_fast_tier_of_tests_and_test_stays_whole():
    """`make check` is the inner loop's tier (conftest.py --fast-tier, issue 58); `make test`, the README's
    one command and CI's, runs everything."""
    assert "--fast-tier" in recipe("check") and " tests " in recipe("check") and "HETLAB_QUICK=1" in recipe("check")
    assert "--fast-tier" not in recipe("test") and "pytest -q $(LANES) $(PYTEST_ARGS)" in recipe("test")


# One environment per machine (issue 28): in the course's conda environment make uses it; anywhere
# else it builds .venv. `make -n -B` prints what make would run, and runs nothing. A conda
# environment cannot exist here: a folder whose bin/python runs this Python stands in for one
# (with torch and Ray: the course's environment; with -S, no site-packages: a conda environment
# without them).
import os
import stat
import subprocess


def fake_prefix(tmp_path, name, flags=""):
    prefix = tmp_path / name
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" {flags} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return prefix


def dry_run(target, conda_prefix=None, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA_", "MAKE"))}
    if conda_prefix is not None:
        env["CONDA_PREFIX"] = str(conda_prefix)
    done = subprocess.run(["make", "-n", "-B", target, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_conda_make_builds_and_uses_the_venv():
    for target in ("lab", "test"):
        out = dry_run(target)
        assert "-m venv .venv" in out and ".venv/bin/python -m pip install" in out
        assert "CONDA" not in out
    assert f"{ROOT}/.venv/bin/jupyter lab" in dry_run("lab")
    assert "HETLAB_QUICK=1 .venv/bin/python -m pytest" in dry_run("test")


def test_in_the_course_conda_environment_make_uses_it_and_builds_no_venv(tmp_path):
    prefix = fake_prefix(tmp_path, "hetlab")
    for target in ("lab", "test"):
        out = dry_run(target, prefix)
        assert f"{prefix}/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'" in out
        assert ".venv" not in out, out
    assert f"{prefix}/bin/jupyter lab" in dry_run("lab", prefix)
    assert f"HETLAB_QUICK=1 {prefix}/bin/python -m pytest" in dry_run("test", prefix)
    assert ".venv/bin/python -m pip install" in dry_run("lab", prefix, "CONDA_ENV=")   # forced .venv


def test_a_conda_environment_without_torch_and_ray_gets_a_venv_from_its_python(tmp_path):
    prefix = fake_prefix(tmp_path, "other", "-S")        # -S: no site-packages, so no ray, no torch
    out = dry_run("lab", prefix)
    assert f"{prefix}/bin/python -m venv .venv" in out and ".venv/bin/python -m pip install" in out
    assert f"{prefix}/bin/python -m pip" not in out


@pytest.mark.slow
def test_ci_runs_two_lanes_and_reads_the_gauge_once_on_each_side():
    """`make test` runs two lanes (conftest.py's SECOND_LANE: pytest-xdist, ``LANES``), and `.ci/run` passes
    --gauge: the ledger's gauge read on each side of the run itself, by the run and not by a lane (a
    reading taken later moved 2,100–3,500 on one box). A real `pytest -n 2 --gauge` of a few tests of each
    lane: each lane's tests ran on one worker, in order, and the run's gauge-seconds at the readings'
    mean lie between those at each."""
    assert re.search(r'^make test PYTEST_ARGS=".*--gauge.*"$', (ROOT / ".ci" / "run").read_text(), re.M)
    assert re.search(r"^LANES \?= -n 2$", (ROOT / "Makefile").read_text(), re.M)
    first = "tests/test_steptime.py"
    second = "tests/test_rehearsal.py::test_firewall_rules_are_the_printed_rules"
    assert second.split("::")[0] in conftest.SECOND_LANE and first not in conftest.SECOND_LANE
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--gauge", first, second],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    ran = re.findall(r"^\[(gw\d)\] \[ *\d+%\] PASSED (\S+)", run.stdout, re.M)
    lanes = {where: {gw for gw, test in ran if test.startswith(where)} for where in (first, second)}
    assert len(lanes[first]) == len(lanes[second]) == 1 and lanes[first] != lanes[second], ran
    steptime = [test for _, test in ran if test.startswith(first)]
    order = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", first], cwd=ROOT,
                           capture_output=True, text=True, timeout=120).stdout.split("\n\n")[0].splitlines()
    assert steptime == order, (steptime, order)               # the lane keeps the file's order
    assert run.stdout.count("the ledger's gauge") == 1, run.stdout
    line = re.search(r"before: ([\d,]+) samples/s \(load [\d.]+\); after: ([\d,]+) \(load [\d.]+\); "
                     r"the run: ([\d.]+) s = (\d+) gauge-seconds at their mean \((\d+) before, (\d+) after\)",
                     run.stdout)
    assert line, run.stdout
    before, after, seconds, mean, at_before, at_after = (float(g.replace(",", "")) for g in line.groups())
    assert before > 0 and after > 0 and seconds > 0
    assert min(at_before, at_after) <= mean <= max(at_before, at_after)
