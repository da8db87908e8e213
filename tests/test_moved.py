"""Day two when an address moved overnight (hetlab.cluster.joining, `hetlab head/join --start`, `hetlab
doctor`, `hetlab pair`), without the rehearsal: this box's own interfaces, TEST-NET addresses
(192.0.2.x, never routed) for the machine that is not here, loopback for a head that is not running.
tests/test_rehearsal.py moves the rehearsal Mac's address for real and follows the printed way on.
"""
import sys

import pytest

from hetlab.cluster import commands, joining
from hetlab.store import saved_pair
from hetlab.errors import HetlabError
from hetlab.tools import cli


HERE = sorted(joining.addresses_here())


def test_a_moved_address_is_one_line_naming_both_and_the_way_on():
    pair = saved_pair.SavedPair("192.0.2.1", "192.0.2.20")
    line = joining.check(pair, "mac", here={"192.0.2.31"})
    assert "\n" not in line and "it was 192.0.2.20, it is 192.0.2.31 now" in line
    assert "`hetlab pair --mac-ip 192.0.2.31` on both machines" in line and "`hetlab join --start` here" in line
    assert joining.check(pair, "mac", here={"192.0.2.20", "192.0.2.31"}) is None       # still there
    assert joining.check(pair, "mac", here={"192.0.2.1"}) is None                       # this is the desktop
    assert "`hetlab pair --desktop-ip 192.0.2.9`" in joining.check(pair, "desktop", here={"192.0.2.9"})
    assert joining.check(None, "mac") is None                                           # no pair saved


@pytest.mark.parametrize("command, role", [("join", "Mac"), ("head", "desktop")])
def test_start_refuses_in_one_line_before_ray_starts(folder, capsys, command, role):
    """This box holds neither saved address: the machine whose address moved, as on day two."""
    saved_pair.save("192.0.2.1", "192.0.2.20")
    assert cli.main([command, "--start"]) == 2
    out, err = capsys.readouterr()
    assert "hetlab: running" not in out and err.count("\n") == 1                     # Ray never started
    old = "192.0.2.20" if role == "Mac" else "192.0.2.1"
    assert f"this {role}'s address changed" in err and f"it was {old}, it is " in err
    new = err.split(", it is ")[1].split(" now")[0]
    assert new in HERE                                                                # one of this box's own


def test_the_doctors_first_check_says_it(folder):
    """The whole `hetlab doctor --head` runs on the rehearsal; here its first check (the rest import torch)."""
    from hetlab.tools import doctor
    assert doctor.pair_check("192.0.2.1:6379") == []                             # no pair saved: no check
    saved_pair.save("192.0.2.1", "192.0.2.20")
    [check] = doctor.pair_check("192.0.2.1:6379")
    assert str(check).startswith("[FAIL] saved pair: this Mac's address changed") and "it was 192.0.2.20" in str(check)
    if HERE:
        saved_pair.save("192.0.2.1", HERE[0])
        assert [c.status for c in doctor.pair_check("192.0.2.1:6379")] == ["ok"]


@pytest.mark.skipif(not HERE, reason="this box has no address but loopback")
def test_pair_on_the_desktop_saves_and_prints_the_ufw_swap(folder, capsys, monkeypatch):
    monkeypatch.setattr("hetlab.windows.wsl.in_wsl", lambda: False)
    saved_pair.save(HERE[0], "192.0.2.20")                                           # this box is the desktop
    assert cli.main(["pair", "--mac-ip", "192.0.2.30"]) == 0
    out, err = capsys.readouterr()                                   # the notes and markers, then the block alone
    assert "admit 192.0.2.30 and delete the rules for 192.0.2.20" in err and "paste from here" in err
    lines = commands.steps(out)                                      # each line numbered: the block stops at a failed one
    assert lines == joining.ufw_swap("192.0.2.20", "192.0.2.30") and len(lines) == 6   # 2 of Ray, 1 of Ray Train, each way
    assert out.splitlines()[-1] == commands.STOPPED
    assert all(line.startswith(("sudo ufw allow proto tcp from 192.0.2.30 ",
                                "sudo ufw delete allow proto tcp from 192.0.2.20 ")) for line in lines)
    day_one = [r for r in commands.ufw_steps(mac_ip="192.0.2.20")[1] if "from 192.0.2.20" in r]
    assert [f"sudo ufw delete {r.removeprefix('sudo ufw ')}" for r in day_one] == lines[3:]   # each old rule goes
    assert saved_pair.load().mac_ip == "192.0.2.30"
    assert cli.main(["pair"]) == 0 and "mac (192.0.2.30)" in capsys.readouterr().out


@pytest.mark.skipif(not HERE, reason="this box has no address but loopback")
def test_pair_on_the_mac_saves_and_says_the_desktop_is_next(folder):
    pair = saved_pair.SavedPair("192.0.2.1", "192.0.2.20")
    notes, block = joining.update(pair, mac_ip=HERE[0], here=set(HERE))
    assert block == [] and f"`hetlab pair --mac-ip {HERE[0]}`" in notes[-1] and saved_pair.load().mac_ip == HERE[0]
    with pytest.raises(HetlabError, match="give both --desktop-ip and --mac-ip"):
        joining.update(None, mac_ip="192.0.2.5")
    # a Windows desktop (WSL, faked: no Windows here): its rules are PowerShell, remade by `hetlab head`'s lines
    notes, block = joining.update(pair, mac_ip="192.0.2.30", here={"192.0.2.1"}, windows=True)
    assert block == [] and "run `hetlab head` and paste its PowerShell firewall lines" in notes[-1]


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


def test_a_start_that_does_not_end_is_stopped_at_its_limit_in_one_line(token, capsys):
    import psutil
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(HetlabError, match=r"had not ended after 1 s .* so hetlab stopped it") as err:
        commands.start([sys.executable, "-c", RETRYING], {}, limit=1)
    out = capsys.readouterr().out
    assert "\n" not in str(err.value) and out.startswith("hetlab: running") and out.count("\n") == 1   # no retry log
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before    # nothing left running
    with pytest.raises(HetlabError, match=r"`ray start` failed \(exit 1\): ConnectionError: GCS — run"):
        commands.start([sys.executable, "-c", FAILING], {})
