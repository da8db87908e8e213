"""hetlab.tools.doctor: local report, version comparison, macOS traps, doctor without and with a head."""
import gzip
import hashlib
import os
import platform
import shutil
import subprocess

import pytest
import ray
import torch

import hetlab
from hetlab import HetlabError
from hetlab.core import data, devices, machine, samecode
from hetlab.tools import doctor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_facts_are_what_this_process_runs():
    report = machine.facts()
    assert report["python"] == platform.python_version()
    assert report["ray"] == ray.__version__ and report["torch"] == torch.__version__
    suffix = {"cuda": "(CUDA)", "mps": "(MPS)"}.get(devices.best())  # CI's box: none; the pair: one each
    assert report["accelerator"] == "none" if suffix is None else report["accelerator"].endswith(suffix)
    assert report["cpus"] >= 1 and report["memory_gb"] > 0


def test_the_facts_name_hetlab_and_the_mnist_files():
    report = machine.facts()
    assert report["hetlab"] == hetlab.__version__
    # this test runs from a git checkout (a worktree's .git is a file): the commit is known
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, timeout=30).stdout.strip()
    assert report["hetlab_commit"] == head
    assert report["mnist_sha256"] == data.SHA256 and report["mnist"] == "verified"
    assert machine.facts()["mnist_sha256"] is not report["mnist_sha256"]  # a copy each time


def test_a_window_for_ray_work_to_start_grows_with_the_load_per_core(monkeypatch):
    """notebook 09's probes wait longer on a busy machine (a practice cluster shares its cores)."""
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    for load, window in ((0.5, 60), (2.0, 120), (5.0, 300), (400.0, 600)):   # 2 × load per core, 1–10×
        monkeypatch.setattr(machine.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert machine.patience(60) == window


def test_mnist_checksums_are_cached_and_see_changes(tmp_path, monkeypatch):
    for name in data.SHA256:
        shutil.copy(os.path.join(ROOT, "data", name), tmp_path / name)
    monkeypatch.setattr(data, "ROOT", tmp_path)
    assert data.checksums() == data.SHA256
    with gzip.open(tmp_path / "t10k-labels-idx1-ubyte.gz", "wb") as f:  # a changed file is hashed again
        f.write(b"not mnist")
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    found = data.checksums()
    assert found["train-labels-idx1-ubyte.gz"] is None
    assert found["t10k-labels-idx1-ubyte.gz"] == hashlib.sha256(b"not mnist").hexdigest()
    status = data.checksum_status(found)
    assert status == "missing train-labels-idx1-ubyte.gz; corrupted t10k-labels-idx1-ubyte.gz"


FACTS = {"ray": "2.60.0", "python": "3.11.7", "torch": "2.13.0+cpu", "hetlab": "0.1.0",
         "hetlab_commit": "fefa2ea", "mnist_sha256": dict(data.SHA256)}


def _by_name(here, head, **kw):
    return {c.name: c for c in doctor.compare_versions(here, head, **kw)}


def test_comparison_of_identical_facts():
    checks = doctor.compare_versions(FACTS, dict(FACTS), python_match="patch")
    assert [(c.name, c.status) for c in checks] == [
        ("Ray version", "ok"), ("Python version", "ok"), ("torch version", "ok"),
        ("hetlab version", "ok")]
    # what the head's GCS tells before connecting: only Ray and Python are compared
    gcs = {"ray": "2.60.0", "python": "3.11.7"}
    assert [c.name for c in doctor.compare_versions(FACTS, gcs)] == ["Ray version", "Python version"]


def test_comparison_flags_each_mismatch_with_its_fix():
    head = {**FACTS, "ray": "2.59.0", "torch": "2.12.0+cu128", "hetlab": "0.2.0", "hetlab_commit": "abc1234"}
    checks = _by_name(FACTS, head, python_match="patch")
    assert checks["Ray version"].status == "FAIL" and "ray[default,train]==2.59.0" in checks["Ray version"].fix
    assert checks["torch version"].status == "warn" and "torch==2.12.0" in checks["torch version"].fix
    assert checks["hetlab version"].status == "FAIL" and "abc1234" in checks["hetlab version"].fix
    same_version = _by_name(FACTS, {**FACTS, "hetlab_commit": "abc1234"})["hetlab version"]
    assert same_version.status == "FAIL" and "git checkout abc1234" in same_version.fix
    pip_installed = _by_name(FACTS, {**FACTS, "hetlab_commit": None})["hetlab version"]
    assert pip_installed.status == "ok"  # no commit to compare on one side
    for c in checks.values():
        assert "\n" not in c.fix and (c.status == "ok" or c.fix)


def test_one_code_on_every_machine_or_one_line_naming_the_machine_to_update():
    """``connect``'s comparison (``samecode.mismatch``); the practice cluster shows it end to end."""
    head = {"hetlab": "0.1.0", "commit": "def5678"}
    assert samecode.mismatch("the desktop", head, {"the desktop": head, "the mac": dict(head)}) is None
    assert samecode.mismatch("the desktop", head, {"the mac": {"hetlab": "0.1.0", "commit": None}}) is None
    assert samecode.mismatch("the desktop", head, {"the mac": {"hetlab": "0.0.9", "commit": None}}) == (
        "the mac runs hetlab 0.0.9, the desktop hetlab 0.1.0 at def5678: on the mac run `git pull` in hetlab's folder (to match the desktop: "
        "`git checkout def5678`), then connect again.")
    assert samecode.mismatch("the desktop", head, {"the mac": {"hetlab": None, "commit": None}}).startswith(
        "the mac cannot import hetlab, the desktop runs hetlab 0.1.0 at def5678: install it there")
    assert samecode.code_here() == {"hetlab": hetlab.__version__, "commit": machine.hetlab_commit()}


def test_python_match_levels():
    patch = _by_name(FACTS, {**FACTS, "python": "3.11.9"}, python_match="patch")["Python version"]
    assert patch.status == "FAIL" and "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor" in patch.fix
    minor = _by_name(FACTS, {**FACTS, "python": "3.11.9"}, python_match="minor")["Python version"]
    assert minor.status == "warn"
    other = _by_name(FACTS, {**FACTS, "python": "3.12.1"}, python_match="minor")["Python version"]
    assert other.status == "FAIL" and "python=3.12.1" in other.fix  # minor level still needs 3.11
    assert "minor" not in other.fix
    with pytest.raises(HetlabError, match="use 'patch'"):
        doctor.compare_versions(FACTS, FACTS, python_match="major")


def test_python_against_the_pin():
    assert doctor.python_check("3.11.7", level="patch").status == "ok"
    patch = doctor.python_check("3.11.9", level="patch")
    assert patch.status == "warn" and "python=3.11.7" in patch.fix and "=minor" in patch.fix
    assert doctor.python_check("3.11.9", level="minor").status == "ok"
    assert doctor.python_check("3.12.0", level="minor").status == "FAIL"


def test_the_doctor_runs_a_macs_checks_on_a_mac_and_a_linux_desktops_on_linux(monkeypatch):
    """The doctor's dispatch by system. macOS is faked: platform.system() says "Darwin", and pmset
    (which cannot exist here) answers as a Mac's does. On the faked Mac the doctor reads it (and not
    GNOME's settings); on this Linux box, the reverse."""
    answers = {("pmset", "-g"): "System-wide power settings:\n sleep                0\n",
               ("pmset", "-g", "batt"): "Now drawing from 'AC Power'\n"}
    asked = []

    def mac_out(argv, **_):
        asked.append(argv[0].rsplit("/", 1)[-1])
        return answers.get(tuple(argv))

    monkeypatch.setattr(doctor.wsl, "output", mac_out)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    mac = {c.name: c for c in doctor.local_checks()}
    assert set(asked) - {"nvidia-smi"} == {"pmset"}   # nvidia-smi: where this box has one
    assert mac["Mac sleep"].status == "ok" and "automatic suspend" not in mac
    asked.clear()
    monkeypatch.undo()
    monkeypatch.setattr(doctor.wsl, "output", mac_out)
    linux = {c.name for c in doctor.local_checks()}
    assert "pmset" not in asked and "automatic suspend" in linux and "Mac sleep" not in linux


def test_doctor_with_unreachable_head_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no token file: this box's own token mode is not the point here
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    checks = doctor.checks(head="127.0.0.1:1")
    failed = [c for c in checks if not c.ok]
    assert len(failed) == 1 and failed[0].name == "head GCS port"
    assert "hetlab head --ip 127.0.0.1" in failed[0].fix
    text = doctor.render(checks)
    assert "1 check(s) failed" in text and "Python" in text
    with pytest.raises(HetlabError, match="malformed"):
        doctor.checks(head="127.0.0.1:port")


def test_token_file_open_to_others_fails_with_the_fix(tmp_path, monkeypatch):
    # A temporary HOME: the real ~/.ray/auth_token is never touched. No Ray needed.
    from hetlab.cluster import connecting
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert doctor.token_file_checks() == []                       # no token file: nothing to fix
    token = home / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("0" * 64)
    token.chmod(0o644)                                               # what Ray 2.60 leaves
    [check] = doctor.token_file_checks()
    assert check.status == doctor.FAIL and check.fix == "chmod 600 ~/.ray/auth_token"
    assert "0644" in check.detail and any(c.name == "token file" and not c.ok
                                          for c in doctor.checks())
    assert connecting.secure_token_files() == [token]
    assert token.stat().st_mode & 0o777 == 0o600 and doctor.token_file_checks()[0].ok
    assert connecting.secure_token_files() == []                      # already private: unchanged

    named = tmp_path / "elsewhere" / "ray-token"                     # RAY_AUTH_TOKEN_PATH is respected
    named.parent.mkdir()
    named.write_text("1" * 64)
    named.chmod(0o640)                                               # group-readable is open too
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    checks = {c.detail.split()[0]: c for c in doctor.token_file_checks()}
    assert not checks[str(named)].ok and checks[str(named)].fix == f"chmod 600 {named}"
    assert checks["~/.ray/auth_token"].ok
    assert connecting.secure_token_files() == [named] and named.stat().st_mode & 0o777 == 0o600


def test_a_gpu_that_torch_cannot_use_fails_on_the_desktop_and_warns_on_the_mac():
    """Ray reports the card whatever torch can do: an NVIDIA desktop whose torch sees no CUDA fails,
    a Mac without MPS warns. Inputs as the real machines give them (this box has neither an NVIDIA
    card nor a Mac's GPU)."""
    found = "cpu; accelerator: none"
    for system in ("Linux", "WSL"):                     # the driver is there but this torch has no CUDA
        cpu_build = doctor.accelerator_check(found, False, system, "x86_64", True)
        assert cpu_build.status == doctor.FAIL and "nvidia-smi sees an NVIDIA card" in cpu_build.detail
        assert "environment-cuda.yml" in cpu_build.fix
    no_mps = doctor.accelerator_check(found, False, "Darwin", "arm64", False)
    assert no_mps.status == doctor.WARN and "MPS" in no_mps.detail and "arm64 conda" in no_mps.fix
    for usable, system, smi in ((True, "Linux", True), (False, "Linux", False), (True, "Darwin", False)):
        assert doctor.accelerator_check("x", usable, system, "arm64", smi).status == doctor.OK
    assert {c.name: c.status for c in doctor.local_checks()}["devices"] == doctor.OK  # this box
