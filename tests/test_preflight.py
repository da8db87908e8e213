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
    # the opt-in belongs to the `ray start` line (hetlab join prints it): unset in the shell is right
    unset = preflight.macos_checks({}, system="Darwin")
    assert unset[0].status == preflight.OK and "hetlab join" in unset[0].detail
    assert "--node-ip-address" in unset[1].fix
    exported = preflight.macos_checks({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}, system="Darwin")
    assert exported[0].status == preflight.WARN and "unset RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in exported[0].fix


def test_doctor_with_unreachable_head_says_how_to_fix():
    checks = preflight.doctor(head="127.0.0.1:1", timeout=5)
    failed = [c for c in checks if not c.ok]
    assert len(failed) == 1 and failed[0].name == "head GCS port"
    assert "hetlab head --ip 127.0.0.1" in failed[0].fix
    text = preflight.render(checks)
    assert "1 check(s) failed" in text and "Python" in text
    with pytest.raises(HetlabError, match="malformed"):
        preflight.doctor(head="127.0.0.1:port")
