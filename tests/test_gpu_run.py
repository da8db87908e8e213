"""The GPU call cannot be wasted (issues 44 and 50): its dry run runs here through the same code paths as on
the card, in a stand-in mode (Ray counts a GPU on the desktop node that is not there; the workers run on this
CPU). `make test` runs the call's plumbing at its smallest (``--plumbing``: its steps in order, their logs,
status, plan, budget lines and the figures line; gpu-check's describe and train_128 rows, then local_loop),
training nothing that other tests train (issue 58); every check and the pair's steps run in
`make gpu-dry-run`. And a call cut short (the lease ran out, a step past its budget) still says which steps
gave nothing."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_figures  # noqa: E402


@pytest.mark.ray   # the call runs local_loop on a practice node (Ray)
def test_the_gpu_calls_plumbing_runs_its_steps_in_order_and_ends_with_the_figures(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "scripts/gpu_run.sh", "--dry-run", "--plumbing"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["steps"] == {"gpu_check": 0, "local_loop": 0}
    assert last["stand_in"] is True and last["missing"] == last["cut"] == last["not_run"] == []
    figures = last["figures"]
    assert {"train_128_plain", "local_loop_end_to_end_over_train"} <= set(figures)
    assert "STAND-IN" in (tmp_path / "local_loop.log").read_text()
    check = gpu_figures.last_json(tmp_path / "gpu_check.log")
    assert check["only"] == ["describe", "train_128"] and check["passed"] is True
    assert list(tmp_path.glob("*-stand-in.json")) and list(tmp_path.glob("*-stand-in.md"))   # the record
    # the budget: each step's on the card beside what it took here, the whole call's at most 8 minutes
    assert "budget on the card" in done.stdout
    plan = dict(line.split() for line in (tmp_path / "plan.txt").read_text().splitlines())
    assert list(plan) == ["gpu_check", "local_loop"]
    assert (tmp_path / "started.txt").read_text().split() == ["gpu_check", "local_loop"]
    budget_line = next(x for x in done.stdout.splitlines() if x.startswith("=== the call's budget on the card"))
    total = re.search(r"; (\d+) s of 480 s$", budget_line.rstrip())
    assert total and int(total.group(1)) <= 480, budget_line
    bad = subprocess.run(["bash", "scripts/gpu_run.sh", "--plumbing"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--plumbing goes with --dry-run" in bad.stderr


def test_a_cut_call_names_every_step_that_gave_nothing(tmp_path):
    """A call cut by the lease: gpu_check ended, pair_vs_alone_128 cut at its budget (its partial log kept),
    pair_vs_alone_1024 started and never ended, local_loop and notebooks never began. The summary names
    each one under cut or not run, and exits 1."""
    (tmp_path / "plan.txt").write_text("".join(f"{n} 60\n" for n in ("gpu_check", "pair_vs_alone_128",
                                                                      "pair_vs_alone_1024", "local_loop", "notebooks")))
    (tmp_path / "started.txt").write_text("gpu_check\npair_vs_alone_128\npair_vs_alone_1024\n")
    (tmp_path / "status.txt").write_text("gpu_check 0\npair_vs_alone_128 124\n")
    row = {"name": "train_128_plain", "figure": 76840.0}
    (tmp_path / "gpu_check.log").write_text("[gpu-check] …\n" + json.dumps({"stand_in": False, "rows": [row]}) + "\n")
    (tmp_path / "pair_vs_alone_128.log").write_text("pair_vs_alone: a GPU machine\n  desktop alone (plain loop): …\n")
    (tmp_path / "pair_vs_alone_1024.log").write_text("")
    done = subprocess.run([sys.executable, "scripts/gpu_figures.py", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["cut"] == ["pair_vs_alone_128", "pair_vs_alone_1024"]
    assert summary["not_run"] == ["local_loop", "notebooks"]
    assert summary["missing"] == ["local_loop", "notebooks", "pair_vs_alone_1024", "pair_vs_alone_128"]
    assert summary["figures"] == {"train_128_plain": 76840.0}
    # a step the script itself skipped for want of time is "not run" too
    (tmp_path / "status.txt").write_text("gpu_check 0\npair_vs_alone_128 124\nlocal_loop not-run\n")
    assert "local_loop" in gpu_figures.figures(tmp_path)["not_run"]
