"""`hetlab train` as a user runs it: a subprocess, a real practice cluster, real MNIST.

The first run (a learner's own network, `--model mynet:tiny`) starts its own practice cluster
(the default) and saves checkpoints; the resume joins a practice cluster started by this module
through --address, as a user would join the real desktop + Mac cluster.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hetlab.tools.cli import main
from hetlab.tools.cli import parse_batch_sizes
from hetlab.errors import HetlabError

REPO = Path(__file__).resolve().parents[1]
COMMON = ["--train-samples", "3000", "--quiet", "--batch-sizes", "48:16"]


def hetlab_train(*args, cwd=REPO, timeout=240):
    env = {**os.environ, "HETLAB_QUICK": "1", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "hetlab", "train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def final_accuracy(stdout: str) -> float:
    match = re.search(r"final test accuracy: ([0-9.]+)", stdout)
    assert match, stdout
    return float(match.group(1))


def test_parse_batch_sizes():
    assert parse_batch_sizes("auto") == "auto"
    assert parse_batch_sizes("96:32") == [96, 32]
    for bad in ("96", "96:-32", "0:32", "a:b", "1:2:3", "3.5:1", "nan:1"):
        with pytest.raises(HetlabError):
            parse_batch_sizes(bad)


@pytest.mark.parametrize("args, words", [
    (["--batch-sizes", "3:-1"], "--batch-sizes"),
    (["--steps", "0"], "--steps"),
    (["--mode", "fastest"], "--mode"),
    (["--model", "huge"], "--model"),
    (["--train-samples", "100"], "--train-samples 100: must be at least 128"),
    (["--train-samples", "70000"], "MNIST has 60000 training samples"),
    (["--local-steps", "0"], "--local-steps 0"),
    (["--resume", "/nonexistent/ckpt"], "--resume /nonexistent/ckpt: no such file or folder"),
    (["--checkpoint-dir", "/proc/no/such"], "--checkpoint-dir /proc/no/such: cannot write there"),
])
def test_bad_input_is_one_line_and_non_zero(args, words, capsys):
    assert main(["train", *args]) == 2                    # checked before any Ray starts
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("HetlabError:") and words in lines[0], lines


def saved_checkpoint(folder, step=30, seed=0, data_len=3000) -> Path:
    """A real checkpoint file as a run at ``step`` writes it, built without Ray: a ``Server``
    used as a plain Python object gives the state (as in test_checkpoint.py)."""
    from hetlab.core.checkpoint import FORMAT, param_signature, save_checkpoint
    from hetlab.ps.server import Server
    options = dict(mode="sync", lr=1e-3, optimizer="adam", max_staleness=2, transfer="fp32", seed=seed)
    state = {"format": FORMAT, "model": "small", "signature": param_signature("small"), "options": options,
             "step": step, "server": Server("small", seed=seed, lr=1e-3, mode="sync").state(),
             "batch_sizes": [48, 16], "stream": {"cursor": 64 * step, "pending": []},
             "workers": [{"name": "desktop"}, {"name": "mac"}], "data_len": data_len, "samples_seen": 64 * step}
    return save_checkpoint(state, Path(folder) / f"step-{step:06d}.pt")


@pytest.mark.parametrize("args, words", [
    (["--steps", "20"], "is at step 30 and --steps is the step to train until: give --steps greater than 30"),
    (["--steps", "30"], "give --steps greater than 30"),
    (["--steps", "40", "--seed", "1"], "trained with --seed 0; give --seed 0 (or leave it out)"),
    (["--steps", "40", "--train-samples", "6000"], "trained with --train-samples 3000; give --train-samples 3000"),
])
def test_resume_that_cannot_continue_is_one_line(args, words, tmp_path, capsys):
    ckpt = saved_checkpoint(tmp_path)
    for where in (ckpt, tmp_path):                             # the file, or the newest one in the folder
        assert main(["train", "--resume", str(where), "--quiet", *args]) == 2  # before any Ray starts
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("HetlabError:") and words in lines[0], lines
        assert str(ckpt) in lines[0]


def test_resume_of_an_empty_folder_is_one_line(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no step-*.pt checkpoint in that folder" in lines[0], lines


def test_resume_takes_seed_and_samples_from_the_checkpoint(tmp_path):
    from hetlab.tools.cli import build_parser, check_train_args
    ckpt = saved_checkpoint(tmp_path, seed=7, data_len=6000)
    opts = check_train_args(build_parser().parse_args(["train", "--resume", str(ckpt), "--steps", "31"]))
    assert (opts["resume"], opts["seed"], opts["train_samples"]) == (ckpt, 7, 6000)
    fresh = check_train_args(build_parser().parse_args(["train"]))  # HETLAB_QUICK=1 in tests
    assert (fresh["resume"], fresh["seed"], fresh["train_samples"]) == (None, 0, 10000)
    assert check_train_args(build_parser().parse_args(["train", "--seed", "3"]))["seed"] == 3


def test_the_options_are_checked_and_parsed():
    from hetlab.tools.cli import build_parser, check_train_args
    fresh = check_train_args(build_parser().parse_args(["train"]))  # HETLAB_QUICK=1 in tests
    assert (fresh["batch_sizes"], fresh["model"], fresh["train_samples"]) == ("auto", "small", 10000)
    split = check_train_args(build_parser().parse_args(["train", "--batch-sizes", "96:32", "--mode", "local-sgd"]))
    assert split["batch_sizes"] == [96, 32] and split["mode"] != fresh["mode"]


@pytest.mark.ray   # Ray in a subprocess
def test_unreachable_address_fails_fast_in_a_subprocess():
    done = hetlab_train("--address", "127.0.0.1:1", "--steps", "1", timeout=90)  # a closed local port
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0], done.stderr


def test_help_reads_well(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--address", "--steps", "--batch-sizes", "--mode", "--local-steps",
                 "--model", "--seed", "--checkpoint-dir", "--resume", "simulated"):
        assert flag in text


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One real run as a learner with their own network would start it: `hetlab train --model
    mynet:tiny` in the folder holding mynet.py (the workers, other processes and on the real pair
    another machine, get the function by value), its own practice cluster, 20 sync steps,
    a checkpoint at the end. The built-in model runs through `hetlab train` in tests/test_rehearsal.py
    and on the practice cluster in the notebooks."""
    here = tmp_path_factory.mktemp("mine")
    (here / "mynet.py").write_text(MYNET)
    folder = here / "ckpt"
    done = hetlab_train("--model", "mynet:tiny", "--steps", "20", "--checkpoint-dir", str(folder), *COMMON, cwd=here)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, done.stdout


@pytest.mark.ray   # `hetlab train` starts its own practice cluster
def test_a_short_run_of_an_own_network_trains_and_checkpoints(checkpoints):
    folder, stdout = checkpoints
    assert "mac · cpu (simulated 4× slower)" in stdout            # the practice mac says what it is
    assert "batch 48:16" in stdout
    assert "model mynet.tiny (5,874 parameters)" in stdout and "sync: step 20, 1280 samples" in stdout
    assert final_accuracy(stdout) > 0.4                     # 1280 samples: far above chance (0.1)
    assert sorted(p.name for p in folder.glob("step-*.pt")) == ["step-000020.pt"]


@pytest.mark.ray   # a practice cluster here, `hetlab train` joins it
def test_resume_through_address_continues_the_step_count(checkpoints):
    from hetlab.cluster.practice import PracticeCluster

    folder, _ = checkpoints
    with PracticeCluster(("desktop", "mac")) as practice:
        done = hetlab_train("--address", practice.address, "--model", "mynet:tiny", "--steps", "30",
                            "--resume", str(folder), "--checkpoint-dir", str(folder), *COMMON, cwd=folder.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stdout and "at step 20" in done.stdout
    assert "sync: step 30, 1920 samples" in done.stdout
    assert final_accuracy(done.stdout) > 0.4
    assert (folder / "step-000030.pt").exists()


def test_cli_model_names_match_the_library():
    from hetlab.core.models import MODELS
    from hetlab.vocab import MODEL_NAMES
    assert set(MODEL_NAMES) == set(MODELS)


MYNET = '''from torch import nn


def tiny():
    """A learner's own MNIST network (not a built-in one)."""
    return nn.Sequential(nn.Conv2d(1, 4, 5, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 12 * 12, 10))


def not_a_network():
    return "tiny"

'''


@pytest.fixture
def mynet_here(tmp_path, monkeypatch):
    """This test's own mynet.py in the current folder, imported afresh."""
    (tmp_path / "mynet.py").write_text(MYNET)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    sys.modules.pop("mynet", None)
    yield tmp_path
    sys.modules.pop("mynet", None)


@pytest.mark.parametrize("model, words", [
    ("nosuchmodule:tiny", "cannot import 'nosuchmodule'"),
    ("mynet:nothing", "'mynet' has no 'nothing'"),
    ("mynet:not_a_network", "returned str, not an nn.Module"),
    ("mynet", "MODULE:FUNCTION"),
])
def test_own_model_from_a_module_bad_input_is_one_line(model, words, mynet_here, capsys):
    assert main(["train", "--model", model]) == 2         # checked before any Ray starts
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
