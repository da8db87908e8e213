"""The GPU call cannot be wasted (issue 44, item 4): its dry run runs here, every step through the same
code paths as on the card, in a stand-in mode (Ray counts a GPU on the desktop node that is not there; the
workers run on this CPU). The short form: gpu-check's device checks, one pair_vs_alone, local_loop."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_calls_dry_run_passes_every_step_and_ends_with_the_figures(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "scripts/gpu_run.sh", "--dry-run", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["steps"] == {"gpu_check": 0, "pair_vs_alone_128": 0, "local_loop": 0}
    assert last["stand_in"] is True and last["missing"] == []
    figures = last["figures"]
    assert {"train_128_plain", "pair_32_measured_over_predicted", "local_loop_end_to_end_over_train"} <= set(figures)
    assert "STAND-IN" in (tmp_path / "pair_vs_alone_128.log").read_text()
    assert "STAND-IN" in (tmp_path / "local_loop.log").read_text()
