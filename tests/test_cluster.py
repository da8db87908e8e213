"""hetlab.cluster (connecting, address, reach): address checks, fast failures on loopback only, embedded Ray, node table."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from hetlab import HetlabError
from hetlab import cluster
from hetlab.cluster.connecting import parse_address, probe_gcs
from hetlab.core import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("text,expected", [
    ("192.168.1.10:6379", ("192.168.1.10", 6379)),
    ("192.168.1.10", ("192.168.1.10", 6379)),
    ("[::1]:7000", ("::1", 7000)),
])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("bad", ["", "auto", "host:port", "1.2.3.4:0", "1.2.3.4:70000",
                                 "http://1.2.3.4:6379", "a b:1", "ray://10.0.0.2"])
def test_malformed_address_is_one_line_error(bad):
    with pytest.raises(HetlabError, match="malformed cluster address") as info:
        parse_address(bad)
    assert "\n" not in str(info.value)


def test_closed_port_fails_fast_with_one_line(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(HetlabError, match="connection refused"):
        cluster.connect("127.0.0.1:1", timeout=10)
    assert not ray.is_initialized()  # no silent local fallback


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf"), "soon", None, True])
def test_bad_timeout_is_one_line_error_up_front(bad):
    was_connected = ray.is_initialized()
    with pytest.raises(HetlabError, match=r"timeout=.*number above 0") as err:
        cluster.connect("127.0.0.1:1", timeout=bad)  # fails before any socket opens
    assert "\n" not in str(err.value) and ray.is_initialized() == was_connected
    assert cluster.check_timeout(2) == 2.0


def test_address_from_environment_never_falls_back(monkeypatch):
    monkeypatch.setenv("HETLAB_ADDRESS", "not-an-address:x")
    with pytest.raises(HetlabError, match="malformed"):
        cluster.connect()
    assert not ray.is_initialized()


def test_listener_that_never_answers_is_not_a_hang():
    # A loopback listener that accepts TCP but never speaks: ray.init would wait for minutes.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        assert "did not answer like a Ray head" in probe_gcs("127.0.0.1", port, timeout=1)
        with pytest.raises(HetlabError, match="did not answer like a Ray head"):
            cluster.connect(f"127.0.0.1:{port}", timeout=3)
    assert not ray.is_initialized()


@pytest.mark.slow   # tens of seconds: make test only
def test_importing_hetlab_changes_no_global_hook():
    # Ray's own import sets sys.excepthook (its custom_excepthook): take the hook after it
    code = "import sys, ray; hook = sys.excepthook; import hetlab, hetlab.cluster, hetlab.ps; print(sys.excepthook is hook)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.stdout.strip() == "True", done.stdout + done.stderr


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    # Ray 2.60's local ray.init() leaves its token file 0644. A copy of this user's token, made
    # 0644 in a private temp folder and named by RAY_AUTH_TOKEN_PATH (same token, so Ray's cached
    # one still fits), shows connect() securing the file Ray reads without loosening the real one.
    default = Path.home() / ".ray" / "auth_token"
    with pytest.MonkeyPatch.context() as env:
        copy = None
        if default.is_file():
            copy = tmp_path_factory.mktemp("token") / "auth_token"
            copy.write_text(default.read_text())
            copy.chmod(0o644)
            env.setenv("RAY_AUTH_TOKEN_PATH", str(copy))
        context = cluster.connect(num_cpus=1)
        context.token_files = [p for p in (copy, default) if p is not None]
        yield context
        ray.shutdown()


def test_embedded_local_ray_and_node_table(local_ray):
    gcs = local_ray.address_info["gcs_address"]
    host, port = parse_address(gcs)
    assert probe_gcs(host, port) is None  # the real GCS answers (with this process's token)
    for token in local_ray.token_files:           # the token files Ray uses here are private
        assert token.stat().st_mode & 0o777 == 0o600, token
    table = cluster.node_table()
    assert len(table) == 1
    row = table[0]
    import platform

    import torch
    assert (row["python"], row["ray"], row["torch"]) == (platform.python_version(), ray.__version__,
                                                          torch.__version__)
    assert row["accelerator"] == machine.facts()["accelerator"] and row["is_head"]  # seen from Ray, too
    assert row["hostname"] in str(table) and repr(table) == str(table)
    with pytest.raises(HetlabError, match="no live node has role 'mac'"):
        cluster.placement("mac")  # a plain local Ray has no hetlab roles


def test_the_rehearsals_rejoin_waits_for_the_old_node_to_go_and_the_new_one_to_come(local_ray, monkeypatch):
    from harness.rehearsal import run as rehearsal
    here = ray.nodes()[0]["NodeManagerAddress"]
    looks = []
    real_nodes = ray.nodes
    monkeypatch.setattr(ray, "nodes", lambda: looks.append(1) or real_nodes())  # counts Ray's real answers
    assert rehearsal._node_at(here, alive=True, timeout=0)           # alive now: no wait
    assert len(looks) == 1
    started = time.perf_counter()
    assert not rehearsal._node_at(here, alive=False, timeout=0.5)    # never goes: False after the timeout
    assert len(looks) == 3                                           # it looked again, then gave up
    assert time.perf_counter() - started >= 0.5  # clock-ok: a lower bound (the timeout was waited out), not a cap
    assert rehearsal._node_at(rehearsal.MAC.ip, alive=False, timeout=0)   # no node there (ray.nodes() only)


def test_waiting_for_a_mac_that_never_comes_ends_in_one_line_that_says_why(local_ray):
    """Notebook 04's wait cell: a live head (this local Ray) and no Mac node. It gives up at its time
    limit and reads why from the desktop's side: here nothing listens at
    the Mac's node-manager port (a closed loopback port stands in for the Mac's address)."""
    from hetlab.cluster import joining
    from hetlab.cluster.practice import free_ports
    from hetlab.vocab import Ports
    closed = free_ports(1)[0]
    with pytest.raises(HetlabError) as err:
        joining.wait_for_mac("127.0.0.1", "127.0.0.1", Ports(node_manager=closed), timeout=1.0)
    assert "the Mac's node has not joined this head" in str(err.value) and "\n" not in str(err.value)


def test_nodes_without_connection_is_one_line_error():
    ray.shutdown()
    with pytest.raises(HetlabError, match="not connected"):
        cluster.nodes()


def test_a_node_that_missed_its_start_up_window_is_started_once_more():
    """connecting.start_with_retry, the one retry behind connect(), PracticeCluster.add_node, the
    rehearsal and the tests' local Ray (a real time-out needs a machine busier than CI's)."""
    from hetlab.cluster.connecting import start_with_retry

    def starts(*outcomes):
        tries, cleaned = [], []

        def start():
            tries.append(1)
            outcome = outcomes[len(tries) - 1]
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return start, tries, cleaned

    late = Exception("The current node timed out during startup. This could happen because ...")
    start, tries, cleaned = starts(late, "node-1")
    assert start_with_retry(start, cleaned.append, lambda exc, t: HetlabError("no")) == "node-1"
    assert len(tries) == 2 and len(cleaned) == 1                         # cleaned up, then once more
    start, tries, cleaned = starts(late, late)
    with pytest.raises(HetlabError, match="busy"):
        start_with_retry(start, cleaned.append, lambda exc, t: HetlabError("busy") if t else None)
    assert len(tries) == 2 and len(cleaned) == 2                         # twice late: give up
    start, tries, cleaned = starts(ValueError("bad port"))
    with pytest.raises(ValueError, match="bad port"):                    # another failure: no retry
        start_with_retry(start, cleaned.append, lambda exc, t: None)
    assert len(tries) == 1 and len(cleaned) == 1


def test_the_pair_from_the_environment_fails_in_one_line_and_starts_no_practice_cluster(monkeypatch):
    """``hetlab.pair.the_pair``: an address set but no head there is an error, never a quiet
    practice cluster instead (the practice path runs in notebooks 05–08 and `hetlab train`)."""
    from hetlab.pair import Pair, the_pair
    from hetlab.ps import WorkerSpec
    monkeypatch.setenv("HETLAB_ADDRESS", "127.0.0.1:1")
    with pytest.raises(HetlabError, match="connection refused") as err:
        the_pair()
    assert "\n" not in str(err.value) and not ray.is_initialized()
    pair = Pair([WorkerSpec("desktop", role="desktop"), WorkerSpec("mac", role="mac", slowdown=2)], "10.0.0.2:6379")
    assert pair.real and pair.slowdowns == [1.0, 2] and pair.device == "auto"
    assert str(pair) == "the cluster at 10.0.0.2:6379; workers: desktop, mac (simulated 2× slower)"
    pair.shutdown()  # a real cluster is left running: nothing to stop here


def test_the_macs_address_is_checked_and_the_desktops_found_toward_it():
    from hetlab.cluster import joining
    assert joining.mac_address(" 192.168.1.20 ") == "192.168.1.20"
    for bad in ("my-mac.local", "192.168.1", "127.0.0.1"):
        with pytest.raises(HetlabError):
            joining.mac_address(bad)
    assert joining.lan_address_toward("127.0.0.1") == "127.0.0.1"   # the route's own address, nothing sent
