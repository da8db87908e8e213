"""hetlab.preflight: local report, version comparison, macOS traps, doctor without and with a head."""
import platform

import pytest
import ray
import torch

from hetlab import HetlabError, preflight


def test_local_report_is_what_this_process_runs():
    report = preflight.local_report()
    assert report["python"] == platform.python_version()
    assert report["ray"] == ray.__version__ and report["torch"] == torch.__version__
    assert report["accelerator"] == "none"  # no CUDA or MPS on this box
    assert report["cpus"] >= 1 and report["memory_gb"] > 0


def test_version_comparison_against_an_altered_copy():
    here = preflight.local_report()
    assert [c.status for c in preflight.compare_versions(here, dict(here))] == ["ok"] * 3
    cuda_build = {**here, "torch": here["torch"].split("+")[0] + "+cu128"}
    assert all(c.ok for c in preflight.compare_versions(here, cuda_build))  # same release, other build
    other_major = {**here, "python": "3.12.1", "torch": "2.12.0"}
    checks = {c.name: c for c in preflight.compare_versions(here, other_major, python_match="minor")}
    assert checks["Python version"].status == preflight.FAIL  # minor level still needs 3.11
    assert "python=3.12.1" in checks["Python version"].fix
    assert checks["torch version"].status == preflight.FAIL and "torch==2.12.0" in checks["torch version"].fix
    with pytest.raises(HetlabError, match="use 'patch'"):
        preflight.compare_versions(here, here, python_match="major")


def test_macos_checks():
    # macOS cannot exist here: the OS name is passed in, the environment is a plain dict.
    assert preflight.macos_checks({}, system="Linux") == []
    missing = preflight.macos_checks({}, system="Darwin")
    assert missing[0].status == preflight.FAIL and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1" in missing[0].fix
    assert "--node-ip-address" in missing[1].fix
    opted_in = preflight.macos_checks({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}, system="Darwin")
    assert opted_in[0].ok


def test_doctor_with_unreachable_head_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no token file: this box's own token mode is not the point here
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    checks = preflight.doctor(head="127.0.0.1:1", timeout=5)
    failed = [c for c in checks if not c.ok]
    assert len(failed) == 1 and failed[0].name == "head GCS port"
    assert "hetlab head --ip 127.0.0.1" in failed[0].fix
    text = preflight.render(checks)
    assert "1 check(s) failed" in text and "Python" in text
    with pytest.raises(HetlabError, match="malformed"):
        preflight.doctor(head="127.0.0.1:port")
    with pytest.raises(HetlabError, match="above 0"):
        preflight.doctor(head="127.0.0.1:1", timeout=0)  # not "Operation now in progress"


def test_token_file_open_to_others_fails_with_the_fix(tmp_path, monkeypatch):
    # A temporary HOME: the real ~/.ray/auth_token is never touched. No Ray needed.
    from hetlab import authtoken
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert preflight.token_file_checks() == []                       # no token file: nothing to fix
    token = home / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("0" * 64)
    token.chmod(0o644)                                               # what Ray 2.60 leaves
    [check] = preflight.token_file_checks()
    assert check.status == preflight.FAIL and check.fix == "chmod 600 ~/.ray/auth_token"
    assert "0644" in check.detail and any(c.name == "token file" and not c.ok
                                          for c in preflight.doctor())
    assert authtoken.secure_token_files() == [token]
    assert token.stat().st_mode & 0o777 == 0o600 and preflight.token_file_checks()[0].ok
    assert authtoken.secure_token_files() == []                      # already private: unchanged

    named = tmp_path / "elsewhere" / "ray-token"                     # RAY_AUTH_TOKEN_PATH is respected
    named.parent.mkdir()
    named.write_text("1" * 64)
    named.chmod(0o640)                                               # group-readable is open too
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    checks = {c.detail.split()[0]: c for c in preflight.token_file_checks()}
    assert not checks[str(named)].ok and checks[str(named)].fix == f"chmod 600 {named}"
    assert checks["~/.ray/auth_token"].ok
    assert authtoken.secure_token_files() == [named] and named.stat().st_mode & 0o777 == 0o600
