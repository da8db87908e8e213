"""Day two's `hetlab head/join --start` (``commands.start``) in one line when it cannot: a head that
is not running (loopback), a `ray start` that does not end or fails.
"""
import sys

import pytest

from hetlab.cluster import commands
from hetlab.errors import HetlabError


@pytest.fixture
def token(tmp_path, monkeypatch):
    path = tmp_path / "auth_token"
    path.write_text("0" * 64)
    path.chmod(0o600)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))


def test_join_start_without_a_head_is_one_line_not_rays_retry_log(token, capsys):
    from hetlab.cluster.practice import free_ports
    argv, env = commands.join_start("127.0.0.1", "127.0.0.1", commands.Ports(gcs=free_ports(1)[0]))
    with pytest.raises(HetlabError, match="does not answer from here: connection refused") as err:
        commands.start(argv, env)
    assert "\n" not in str(err.value) and "hetlab: running" not in capsys.readouterr().out


# Stand-ins for a `ray start` that Ray's retries keep from ending, and one that fails: Python
# printing Ray's words (a real one needs a head that never answers, for minutes).
RETRYING = "import time; print('Failed to connect to GCS at address 192.0.2.1:6379 within 5 seconds.', flush=True); time.sleep(120)"
FAILING = "print('Failed to connect to GCS at address 192.0.2.1:6379 within 5 seconds.'); print('ConnectionError: GCS'); raise SystemExit(1)"


def test_a_start_that_does_not_end_is_stopped_at_its_limit_in_one_line(token, capsys, monkeypatch):
    import psutil
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(HetlabError, match=r"had not ended after 1 s .* so hetlab stopped it") as err:
        monkeypatch.setattr(commands, "START_LIMIT_S", 1.0)
        commands.start([sys.executable, "-c", RETRYING], {})
    out = capsys.readouterr().out
    assert "\n" not in str(err.value) and out.startswith("hetlab: running") and out.count("\n") == 1   # no retry log
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before    # nothing left running
    with pytest.raises(HetlabError, match=r"`ray start` failed \(exit 1\): ConnectionError: GCS — run"):
        commands.start([sys.executable, "-c", FAILING], {})
