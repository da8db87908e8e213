"""The doctor on a Windows desktop (WSL2) and a Linux desktop; ``hetlab wslconfig``; and the Ray Train
ports the printed Windows rule must cover.

No Windows machine and no WSL exist here. What WSL and Windows print (``wslinfo``, ``ver``) and what
GNOME prints are SUPPLIED by the tests, written as those machines print them. The ``.wslconfig`` is
read from a real file; the Ray Train ports are those a real torch process group, set up as Ray Train
sets it up, listens on here.
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

LAN_IP = "192.168.1.10"
MAC = "192.168.1.20"
GOOD_WSLCONFIG = "[wsl2]\nmemory=16GB\nnetworkingMode=Mirrored\nvmIdleTimeout=-1\n\n[general]\ninstanceIdleTimeout=-1\n"


def test_networking_names_the_reason_wsl_is_still_nat():
    assert doctor.networking_check("mirrored\n", 22631).status == doctor.OK
    old = doctor.networking_check("nat\n", 19045)
    assert old.status == doctor.FAIL and "needs Windows 11 22H2" in old.detail and "Windows Update" in old.fix
    assert "hetlab wslconfig" not in f"{old.detail} {old.fix}"      # no setting helps below 22621
    unset = doctor.networking_check("nat\n", 22631)
    assert unset.status == doctor.FAIL and unset.detail.startswith("nat:") and "hetlab wslconfig" in unset.fix
    assert "wsl --update" in unset.fix and "1 check(s) failed" in doctor.render([unset])
    assert doctor.os_checks("Linux") and not any(c.name.startswith("WSL") for c in doctor.os_checks("Linux"))


def test_wslconfig_says_what_the_file_lacks_and_opens_it_in_notepad(tmp_path, monkeypatch, capsys):
    """``hetlab wslconfig`` reads the file, never writes it: the lines it lacks, and the one line
    that opens it in Notepad; a file with them, nothing to do."""
    assert cli.main(["wslconfig"]) == 2                            # here: no WSL, no Windows profile
    assert "run `hetlab wslconfig` inside WSL" in capsys.readouterr().err
    path = tmp_path / ".wslconfig"
    monkeypatch.setattr(windows, "wslconfig_path", lambda: path)   # no Windows here: its profile, supplied
    mine = "# my WSL\r\n[wsl2]\r\nmemory=16GB\r\nnetworkingMode = NAT  # was here\r\n"
    path.write_bytes(mine.encode())
    assert cli.main(["wslconfig"]) == 0
    out, err = capsys.readouterr()
    assert path.read_bytes() == mine.encode()                      # the learner's file, untouched
    assert commands.steps(out) == [f"notepad.exe \"$(wslpath -w '{path}')\""]
    assert "wsl2.networkingMode=mirrored" in err and "general.instanceIdleTimeout=-1" in err and "memory" not in err
    for line in windows.lines():
        assert f"   {line}" in err.splitlines()
    path.write_text(GOOD_WSLCONFIG)
    assert cli.main(["wslconfig"]) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert windows.missing(GOOD_WSLCONFIG) == []                   # compared without case, as WSL reads it
    assert windows.missing(GOOD_WSLCONFIG + "[wsl2]\nvmIdleTimeout=60\n") == ["wsl2.vmIdleTimeout=-1"]  # the last wins


def test_linux_automatic_suspend_is_a_warning():
    on = doctor.suspend_check("'suspend'\n", "1200\n", "enabled\n")   # GNOME's defaults on AC
    assert on.status == doctor.WARN and "after 20 min" in on.detail and "sleep-inactive-ac-type 'nothing'" in on.fix
    assert doctor.suspend_check("'nothing'\n", "1200\n", "enabled\n").status == doctor.OK
    assert doctor.suspend_check("'suspend'\n", "0\n", "enabled\n").status == doctor.OK
    assert doctor.suspend_check("'suspend'\n", "1200\n", "masked\n").status == doctor.OK
    assert "no GNOME" in doctor.suspend_check(None, None, None).detail
    here = {c.name for c in doctor.os_checks("Linux")}          # this machine (Linux, no WSL)
    assert here == {"automatic suspend"}


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
