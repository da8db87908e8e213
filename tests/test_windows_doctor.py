"""The doctor on a Windows desktop (WSL2), a Linux desktop and a Mac; ``hetlab wslconfig``; and the
Ray Train ports the printed Windows rule must cover.

No Windows machine, no WSL and no Mac exist here. What Windows prints through WSL's interop (``ver``,
``wsl --version``, powercfg, NVIDIA's nvidia-smi) and what ufw, GNOME
and macOS's firewall print are SUPPLIED by the tests, written as those machines print them. The
``.wslconfig`` edits run on real files; the Ray Train ports are those a real torch process group,
set up as Ray Train sets it up, listens on here.
"""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

import pwsh_grammar as pwsh
from hetlab.cluster import commands
from hetlab.windows import wsl as windows
from hetlab.tools import cli
from hetlab.tools import doctor
from hetlab.vocab import Ports

WSL2_RELEASE = "5.15.153.1-microsoft-standard-WSL2"
WSL_ENV = {"WSL_DISTRO_NAME": "Ubuntu", "WSL_INTEROP": "/run/WSL/1_interop"}
LAN_IP = "192.168.1.10"
MAC = "192.168.1.20"
GOOD_WSLCONFIG = "[wsl2]\nmemory=16GB\nnetworkingMode=Mirrored\nvmIdleTimeout=-1\n\n[general]\ninstanceIdleTimeout=-1\n"
# powercfg /query SCHEME_CURRENT SUB_SLEEP in German: the labels change, the GUIDs, aliases and values do not
POWER_OFF = "".join(f"    GUID der Energieeinstellung: {guid}  (x)\n      GUID-Alias: {name}\n"
                    f"    Index der aktuellen Wechselstromeinstellung: 0x00000000\n"
                    f"    Index der aktuellen Gleichstromeinstellung: 0x00000384\n"
                    for name, guid in windows.POWER_GUIDS.items())


def _signs(**changes):
    signs = {"platform": "linux", "release": WSL2_RELEASE, "env": WSL_ENV, "interop": True, "dxg": True,
             "wslinfo": "mirrored\n", "build": 22631, "wslconfig": GOOD_WSLCONFIG, "powercfg": POWER_OFF}
    return {**signs, **changes}


def _by_name(signs) -> dict:
    return {c.name: c for c in doctor.wsl_checks(signs)}


def test_a_good_wsl_desktop_passes_every_check():
    checks = doctor.wsl_checks(_signs())
    assert [c.name for c in checks] == ["WSL", "WSL networking", "Windows sleep"]
    assert all(c.status == doctor.OK for c in checks), [str(c) for c in checks]
    assert doctor.wsl_checks(windows.local_signs()) == []       # this machine: no WSL


def test_networking_names_the_reason_wsl_is_still_nat():
    nat = dict(wslinfo="nat\n")
    old = _by_name(_signs(build=19045, **nat))["WSL networking"]
    assert old.status == doctor.FAIL and "needs Windows 11 22H2" in old.detail and "Windows Update" in old.fix
    unset = _by_name(_signs(wslconfig="[wsl2]\nmemory=8GB\n", **nat))["WSL networking"]
    assert unset.status == doctor.FAIL and unset.detail.startswith("nat:") and "hetlab wslconfig" in unset.fix
    stale = _by_name(_signs(**nat))["WSL networking"]            # .wslconfig says mirrored: WSL too old, or no restart
    assert stale.detail.startswith(".wslconfig says mirrored but WSL runs nat") and "wsl --update" in stale.fix
    idle = _by_name(_signs(wslconfig="[wsl2]\nnetworkingMode=mirrored\n"))["WSL networking"]
    assert idle.status == doctor.WARN and "general.instanceIdleTimeout=-1" in idle.detail
    assert "1 check(s) failed" in doctor.render(doctor.wsl_checks(_signs(build=19045, **nat)))


def test_windows_sleep_is_read_back():
    power = doctor.power_check(POWER_OFF.replace("0x00000000", "0x00000708", 1))
    assert power.status == doctor.WARN and "sleep after 30 min" in power.detail
    assert "powercfg /change standby-timeout-ac 0" in power.fix and "hibernate" not in power.fix
    assert doctor.power_check(None).status == doctor.WARN
    assert doctor.power_check(POWER_OFF.replace(windows.POWER_GUIDS["STANDBYIDLE"], "0" * 36)).status \
        == doctor.OK                                            # found by its alias too


def test_wslconfig_says_what_the_file_lacks_and_opens_it_in_notepad(tmp_path, capsys):
    """``hetlab wslconfig`` reads the file, never writes it: the lines it lacks, and the one line
    that opens it in Notepad; a file with them, nothing to do; ``--undo``, the teardown."""
    path = tmp_path / ".wslconfig"
    mine = "# my WSL\r\n[wsl2]\r\nmemory=16GB\r\nnetworkingMode = NAT  # was here\r\n"
    path.write_bytes(mine.encode())
    assert cli.main(["wslconfig", "--file", str(path)]) == 0
    out, err = capsys.readouterr()
    assert path.read_bytes() == mine.encode()                      # the learner's file, untouched
    assert commands.steps(out) == [f"notepad.exe \"$(wslpath -w '{path}')\""]
    assert "wsl2.networkingMode=mirrored" in err and "general.instanceIdleTimeout=-1" in err and "memory" not in err
    for line in windows.lines():
        assert f"   {line}" in err.splitlines()
    path.write_text(GOOD_WSLCONFIG)
    assert cli.main(["wslconfig", "--file", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert windows.parse(GOOD_WSLCONFIG)["wsl2"]["networkingMode"] == "Mirrored" and \
        windows.missing(windows.parse(GOOD_WSLCONFIG)) == []        # compared without case, as WSL reads it
    assert cli.main(["wslconfig", "--undo"]) == 0
    assert commands.pasted(capsys.readouterr().out)[-1] == "wsl --shutdown"
    assert cli.main(["wslconfig"]) == 2                            # here: no WSL, no --file
    assert "run `hetlab wslconfig` inside WSL" in capsys.readouterr().err


UFW_INACTIVE = "Status: inactive\n"
UFW_ACTIVE = "Status: active\n\nTo                         Action      From\n--                         ------      ----\n22/tcp                     ALLOW       Anywhere\n"


def test_an_inactive_ufw_says_its_rules_do_nothing_and_how_to_enable_it_without_losing_ssh():
    off = doctor.ufw_check(UFW_INACTIVE, None)
    assert off.status == doctor.WARN and "rules do nothing" in off.detail
    assert "notebook 04" in off.fix
    from hetlab.cluster import commands
    printed = "\n".join(commands.ufw_steps(mac_ip="192.168.1.20")[1])   # what the fix sends the learner to
    steps = [printed.index(s) for s in ("ufw allow 22/tcp", "ufw default deny incoming",
                                        "ufw allow proto tcp from 192.168.1.20", "ufw --force enable")]
    assert steps == sorted(steps)                                  # SSH allowed first, enabled last
    assert doctor.ufw_check(None, "# /etc/ufw/ufw.conf\nENABLED=no\nLOGLEVEL=low\n").status == doctor.WARN
    assert doctor.ufw_check(None, "ENABLED=yes\n").status == doctor.OK   # not root: ufw.conf says
    assert doctor.ufw_check(UFW_ACTIVE, "ENABLED=no\n").status == doctor.OK
    assert "apt install ufw" in doctor.ufw_check(None, None).fix
    assert "Mac firewall" not in str(doctor.mac_firewall_check(None))
    [mac_off] = doctor.mac_firewall_check("Firewall is disabled. (State = 0)\n")
    assert mac_off.status == doctor.WARN and "--setglobalstate on" in mac_off.fix
    [mac_on] = doctor.mac_firewall_check("Firewall is enabled. (State = 1)\n")
    assert mac_on.status == doctor.OK
    [block_all] = doctor.mac_firewall_check("Firewall is blocking all non-essential incoming connections. "
                                              "(State = 2)\n")
    assert block_all.status == doctor.WARN and "Block all incoming" in block_all.fix


def test_linux_automatic_suspend_is_a_warning():
    on = doctor.suspend_check("'suspend'\n", "1200\n", "enabled\n")   # GNOME's defaults on AC
    assert on.status == doctor.WARN and "after 20 min" in on.detail and "sleep-inactive-ac-type 'nothing'" in on.fix
    assert doctor.suspend_check("'nothing'\n", "1200\n", "enabled\n").status == doctor.OK
    assert doctor.suspend_check("'suspend'\n", "0\n", "enabled\n").status == doctor.OK
    assert doctor.suspend_check("'suspend'\n", "1200\n", "masked\n").status == doctor.OK
    assert "no GNOME" in doctor.suspend_check(None, None, None).detail
    here = {c.name for c in doctor.os_checks("Linux")}          # this machine (Linux, no WSL)
    assert {"firewall", "automatic suspend"} <= here and "WSL" not in here


# --- Ray Train's ports: a real torch process group, set up as Ray Train's backend sets it up ---

RANK = """
import json, os, sys, psutil, torch.distributed as dist
from ray.train.torch.config import _setup_torch_process_group
from hetlab.raytrain import exchange
rank, url = int(sys.argv[1]), sys.argv[2]
exchange.register()                       # as hetlab's Ray Train backend does on every rank
_setup_torch_process_group(backend="hetlab", world_rank=rank, world_size=2, init_method=url, timeout_s=60)
import torch
t = torch.ones(4); dist.all_reduce(t)
me = os.getpid()
ports = sorted({c.laddr.port for c in psutil.net_connections("tcp") if c.pid == me and c.status == "LISTEN"})
print(json.dumps({"rank": rank, "sum": t.tolist(), "listening": ports}), flush=True)
dist.barrier(); dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow   # tens of seconds: make test only
def test_the_printed_rule_covers_the_ports_ray_train_uses():
    """Two ranks set up torch's process group with Ray Train's own function (hetlab's exchange, a tcp://
    rendezvous on the pinned port), all-reduce, and report every TCP port they listen on: the rendezvous
    store (rank 0), and nothing else, which the Ray Train rule that part B prints opens."""
    ports = Ports(train_rendezvous=_free_port())
    text = windows.render_head(LAN_IP, MAC, ports)
    rules = [(name, pwsh.flat(params)) for name, params in
             pwsh.parse("\n".join(line for line in commands.pasted(text)
                                    if line.startswith("New-NetFirewall") and windows.TRAIN_RULE in line))]
    opened = {name: set().union(*[set(range(int(r.split("-")[0]), int(r.split("-")[-1]) + 1))
                                  for r in params.get("LocalPorts", params.get("LocalPort"))])
              for name, params in rules}
    assert opened["New-NetFirewallHyperVRule"] == opened["New-NetFirewallRule"]
    url = f"tcp://127.0.0.1:{ports.train_rendezvous}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for rank in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outs]
    seen = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [s["sum"] for s in seen] == [[2.0] * 4] * 2            # the group really worked
    assert seen[0]["listening"] == [ports.train_rendezvous] and seen[1]["listening"] == []  # the store alone
    assert opened["New-NetFirewallRule"] == {ports.train_rendezvous}
    assert re.search(rf"-LocalPort '{ports.train_rendezvous}' ", text)


def test_wslconfig_below_22621_refuses_and_the_doctor_gives_no_wslconfig_advice(tmp_path, monkeypatch, capsys):
    from hetlab.tools import cli
    path = tmp_path / ".wslconfig"
    monkeypatch.setattr(cli, "_windows_build", lambda wsl: 19045)         # no Windows here: its build, faked
    assert cli.main(["wslconfig", "--file", str(path)]) == 2 and not path.exists()
    err = capsys.readouterr().err
    assert err.startswith("HetlabError: Windows build 19045: mirrored networking needs") and err.count("\n") == 1
    checks = _by_name(_signs(build=19045, wslinfo="nat\n", wslconfig="[wsl2]\nmemory=8GB\n"))
    assert not [c.name for c in checks.values() if "hetlab wslconfig" in f"{c.detail} {c.fix}"]
    monkeypatch.setattr(cli, "_windows_build", lambda wsl: None)          # unread: the file's lines still
    assert cli.main(["wslconfig", "--file", str(path)]) == 0 and not path.exists()
    assert "lacks wsl2.networkingMode=mirrored" in capsys.readouterr().err
