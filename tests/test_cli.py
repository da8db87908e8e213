"""The hetlab console script: head/join print commands, doctor checks, bad input is one line (exit 2)."""
import os
import subprocess
import sys
from pathlib import Path

from hetlab.tools import cli


def test_head_prints_secure_commands(capsys):
    assert cli.main(["head", "--ip", "127.0.0.1"]) == 0
    out = capsys.readouterr().out
    assert "--node-ip-address=127.0.0.1" in out and "RAY_AUTH_MODE=token" in out
    assert "--dashboard-host=127.0.0.1" in out and "ray get-auth-token --generate" in out


def test_join_prints_mac_commands(capsys):
    assert cli.main(["join", "--head", "192.168.1.10", "--ip", "192.168.1.20"]) == 0
    out = capsys.readouterr().out
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1" in out and "--address=192.168.1.10:6379" in out
    assert cli.main(["join", "--head", "192.168.1.10"]) == 0
    assert "--node-ip-address=MAC_IP" in capsys.readouterr().out


def test_head_without_an_address_asks_for_the_desktops_with_hostname(capsys, monkeypatch, tmp_path):
    """`hetlab head` with no address and no pair saved asks for the desktop's, and says how Linux shows it."""
    from hetlab.windows import wsl
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))               # no pair saved: the flag is asked for
    for name in ("HETLAB_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(wsl, "in_wsl", lambda: False)
    assert cli.main(["head"]) == 2
    err = capsys.readouterr().err
    assert "--ip DESKTOP_IP (this desktop's LAN address: hostname -I)" in err and err.count("\n") == 1


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert cli.main(["join", "--head", "my-desktop"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("HetlabError: head IP 'my-desktop' is not an IP address") and err.count("\n") == 1


def test_doctor_exit_status(capsys):
    assert cli.main(["doctor", "--head", "127.0.0.1:1"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] head GCS port" in out and "→" in out


def test_rehearse_help_prints_help_and_starts_nothing(capsys, monkeypatch):
    """``python -m harness.rehearsal ACTION --help``: the command's place (after ACTION) swallowed
    --help, so ``up --help`` built a rehearsal. Any rehearsal action here fails the test."""
    from harness import rehearsal
    from harness.rehearsal.__main__ import main

    def refuse(*args, **kwargs):
        raise AssertionError("a rehearsal action ran")
    for name in ("up", "down", "status", "lab", "run_on"):
        monkeypatch.setattr(rehearsal, name, refuse)
    for action in ("up", "down", "status", "lab", "run"):
        assert main([action, "--help"]) == 0
        assert capsys.readouterr().out.startswith("usage: python -m harness.rehearsal")
    assert main(["down", "now"]) == 2
    err = capsys.readouterr().err
    assert err == ("HetlabError: rehearse down takes no command (now): only "
                   "`python -m harness.rehearsal run -- COMMAND` runs one.\n")
    assert "rehearse" not in cli.build_parser()._subparsers._group_actions[0].choices   # not a learner's command


def test_parser_lists_subcommands():
    names = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert {"doctor", "head", "join"} <= names


def test_building_the_parser_loads_no_ray():
    code = "import sys; from hetlab.tools import cli; cli.build_parser().parse_args(['head', '--ip', '1.2.3.4']); " \
           "print(sorted(m for m in ('ray', 'torch') if m in sys.modules))"
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(root)}).stdout
    assert out.strip() == "[]"
