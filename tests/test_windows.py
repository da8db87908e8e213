"""A Windows desktop (WSL2) and a Mac's power for a long run: hetlab.windows.wsl and the doctor's OS checks.

No Windows machine and no Mac exist here. Every WSL sign below (kernel release strings, WSL's
environment variables, addresses and MAC prefixes, ``wslinfo`` output, ``.wslconfig`` text) and
every ``pmset`` output is SUPPLIED by the test, written as those machines print them; each test
also runs the same functions on this machine's own signs, where they must find no WSL.
"""
import re
import shlex
from pathlib import Path

import pytest

import pwsh_grammar as pwsh
from hetlab import HetlabError
from hetlab.cluster import commands
from hetlab.windows import wsl as windows
from hetlab.cluster.commands import Ports
from hetlab.tools import cli
from hetlab.tools import doctor

# --- supplied signs (not this machine's) ---
WSL2_RELEASE = "5.15.153.1-microsoft-standard-WSL2"   # uname -r in WSL 2 (Ubuntu on Windows 11)
WSL1_RELEASE = "4.4.0-19041-Microsoft"                # uname -r in WSL 1
LINUX_RELEASE = "6.8.0-45-generic"                    # a plain Ubuntu desktop
WSL_ENV = {"WSL_DISTRO_NAME": "Ubuntu", "WSL_INTEROP": "/run/WSL/1_interop"}
HEAD, MAC = "192.168.1.10", "192.168.1.20"


def test_wsl_is_recognised_from_its_signs_and_this_machine_is_not_wsl():
    assert windows.is_wsl(WSL2_RELEASE, {}) and windows.is_wsl(WSL1_RELEASE, {})
    assert windows.is_wsl(LINUX_RELEASE, {"WSL_DISTRO_NAME": "Ubuntu"})
    assert windows.is_wsl(LINUX_RELEASE, {"WSL_INTEROP": "/run/WSL/1_interop"})
    assert windows.is_wsl(LINUX_RELEASE, {}, interop=True)
    assert not windows.is_wsl(LINUX_RELEASE, {"PATH": "/usr/bin"})
    assert not windows.in_wsl()                                   # this machine (real signs)


def test_mirrored_and_nat_networking_are_told_apart():
    assert windows.networking_mode("mirrored\n") == "mirrored"      # wslinfo --networking-mode says
    assert windows.networking_mode("NAT\n") == "nat"
    assert windows.networking_mode(None) == windows.networking_mode("") == "unknown"   # WSL before 2.0: no wslinfo


def _ports(ranges: list[str]) -> set[int]:
    found = set()
    for r in ranges:
        low, _, high = r.partition("-")
        found |= set(range(int(low), int(high or low) + 1))
    return found


def _part(text: str, letter: str) -> str:
    """Part A, B or C of the printed Windows steps: its notes and its block."""
    [part] = [p for p in text.split("\n\n") if any(line.startswith(f"{letter}) ") for line in p.splitlines())]
    return part


def _code(part: str) -> str:
    """The one block of a part: exactly what is pasted."""
    [(_, code)] = commands.blocks(part)
    return code


def _bound(text: str) -> list[tuple[str, dict]]:
    """The commands of PowerShell ``text``, each cmdlet bound against Microsoft's parameter table."""
    ran = pwsh.parse(text)
    errors = [e for name, params in ran if name in pwsh.CMDLETS for e in pwsh.binding_errors(name, params)]
    assert errors == [], errors
    return [(name, pwsh.flat(params)) for name, params in ran]


def test_the_grammar_refuses_what_powershell_would_not_bind():
    with pytest.raises(AssertionError):
        pwsh.parse("New-NetFirewallRule -DisplayName 'hetlab Ray -Direction Inbound\n")     # syntax
    assert pwsh.parse("wsl --shutdown\npowercfg /change standby-timeout-ac 0\n") == [
        ("wsl", {"shutdown": []}), ("powercfg", {None: [["/change"], ["standby-timeout-ac"], ["0"]]})]
    good = "New-NetFirewallRule -DisplayName 'x' -LocalPort '6379-6385','10001-10063' -Direction Inbound"
    [(name, params)] = pwsh.parse(good)
    assert pwsh.binding_errors(name, params) == []
    for bad in ("New-NetFirewallRule -DisplayName 'x' -LocalPort '6379-6385' '10001-10063'",   # a space
                "New-NetFirewallHyperVRule -DisplayName 'x' -LocalPort '6379'",   # the Hyper-V cmdlet's is LocalPorts
                "New-NetFirewallRule -DisplayName 'x','y'",                       # a list for a string
                "New-NetFirewallRule -DisplayName 'x' -Direction Inward",         # not in the enum
                "New-NetFirewallHyperVRule -Direction Inbound -LocalPorts '22'",  # no -DisplayName: a prompt
                "Remove-NetFirewallRule -DisplayName 'x' -ErrorAction Quietly"):
        [(name, params)] = pwsh.parse(bad)
        assert pwsh.binding_errors(name, params) != [], bad


@pytest.mark.parametrize("ports", [Ports(), Ports(gcs=7379, node_manager=7380, min_worker=11000, max_worker=11040)])
def test_powershell_rules_open_exactly_the_heads_ports_to_the_mac_only(ports):
    """As the ufw tests do: the ports in each rule are exactly those the head listens on for the Mac;
    each rule is removed first, so pasting part B twice leaves one rule of each."""
    text = windows.render_head(HEAD, MAC, ports)
    ran = _bound(_code(_part(text, "B")))
    made = [(name, params) for name, params in ran if name.startswith("New-NetFirewall")]
    assert [(name, params["DisplayName"]) for name, params in made] == [
        ("New-NetFirewallHyperVRule", [windows.RULE]), ("New-NetFirewallRule", [windows.RULE]),
        ("New-NetFirewallHyperVRule", [windows.TRAIN_RULE]), ("New-NetFirewallRule", [windows.TRAIN_RULE])]
    for i, (name, params) in enumerate(ran):
        if name.startswith("New-NetFirewall"):   # each New- follows the Remove- of the same rule, silently
            assert ran[i - 1] == (name.replace("New-", "Remove-"),
                                  {"DisplayName": params["DisplayName"], "ErrorAction": ["SilentlyContinue"]})
    for name, params in made:
        hyperv = name == "New-NetFirewallHyperVRule"
        local = params["LocalPorts" if hyperv else "LocalPort"]
        if params["DisplayName"] == [windows.RULE]:
            assert _ports(local) == set(ports.listening(head=True))
            assert not _ports(local) & set(ports.local_only(head=True))  # dashboard, metrics stay closed
        else:
            assert local == [str(ports.train_rendezvous)]    # the rendezvous store alone: no gloo ports
        assert params["RemoteAddresses" if hyperv else "RemoteAddress"] == [MAC]  # the Mac, nobody else
        assert (params["Direction"], params["Protocol"], params["Action"]) == (["Inbound"], ["TCP"], ["Allow"])
        assert params.get("VMCreatorId") == ([windows.WSL_VM_CREATOR] if hyperv else None)
    assert windows.WSL_VM_CREATOR == "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"  # WSL's, in Microsoft's docs
    rest = [(n, p) for n, p in ran if not n.endswith("NetFirewallHyperVRule") and not n.endswith("NetFirewallRule")]
    assert rest == [("powercfg", {None: ["/change", "standby-timeout-ac", "0"]}),
                    ("powercfg", {None: ["/change", "hibernate-timeout-ac", "0"]}),
                    ("wsl", {"update": []}), ("wsl", {"shutdown": []})]   # last: it closes Ubuntu's windows
    assert "Set-Content" not in text and ".wslconfig\"" not in _part(text, "B")   # hetlab wslconfig edits it


def test_the_wsl_head_runs_the_linux_heads_ray_start_line_after_the_wslconfig_step():
    text = windows.render_head(HEAD, MAC, build=22631)
    assert [next(line[0] for line in p.splitlines() if re.match(r"[A-C]\) ", line))
            for p in text.split("\n\n")] == ["A", "B", "C"]
    assert _code(_part(text, "A")) == "hetlab wslconfig"
    assert cli.build_parser().parse_args(["wslconfig"]).run.__name__ == "_wslconfig"
    linux = commands.render_head(HEAD)
    start = next(line for line in commands.pasted(linux) if " ray start --head" in line)
    assert start in commands.pasted(_part(text, "C"))
    assert "--node-ip-address=192.168.1.10" in start and "sudo ufw" not in text
    assert "-LocalPort '6386' " in text and "build 22631" in text   # the rendezvous store alone
    assert "-RemoteAddresses 'MAC_IP'" in windows.render_head(HEAD) and "'MAC_IP'" not in text
    with pytest.raises(HetlabError) as info:
        windows.render_head(HEAD, "my-mac.local")
    assert "\n" not in str(info.value) and "the Mac's IP" in str(info.value)
    for line in _code(_part(text, "C")).splitlines():              # bash: each line splits cleanly
        shlex.split(line)


def test_the_build_decides_19045_fails_and_22621_passes(capsys):
    """Windows 10 22H2 (19045) and Windows 11 21H2 (22000) have no mirrored networking; 22H2 (22621) has."""
    assert windows.windows_build("\nMicrosoft Windows [Version 10.0.19045.4529]\n") == 19045
    assert windows.windows_build("Microsoft Windows [version 10.0.22621.3155]") == 22621
    assert windows.windows_build("") is None and windows.windows_build(None) is None
    for build in (19045, 22000, 22620):
        problem = windows.build_problem(build)
        assert problem.startswith(f"Windows build {build}: mirrored networking needs Windows 11 22H2 or newer; "
                                  f"no .wslconfig change helps")
        with pytest.raises(HetlabError) as info:
            windows.render_head(HEAD, MAC, build=build)
        assert "\n" not in str(info.value) and "no .wslconfig change helps" in str(info.value)
        check = doctor.networking_check("nat", build)
        assert check.status == doctor.FAIL and "22H2" in check.detail and "winver" in check.fix
    for build in (22621, 22631, 26100):
        assert windows.build_problem(build) is None
        assert "hetlab wslconfig" in doctor.networking_check("nat", build).fix
        assert "ray start --head" in windows.render_head(HEAD, MAC, build=build)
    assert "`winver` on Windows shows the version" in windows.render_head(HEAD, MAC)   # build unknown


def test_head_prints_linux_steps_here_and_windows_steps_inside_wsl(capsys, monkeypatch):
    assert cli.main(["head", "--ip", HEAD]) == 0                               # this machine: Linux
    assert "New-NetFirewall" not in capsys.readouterr().out
    monkeypatch.setattr(windows, "in_wsl", lambda: True)                      # inside WSL (supplied)
    monkeypatch.setattr(windows, "output", lambda argv, **kw: None)           # no Windows behind it here
    assert cli.main(["head", "--ip", HEAD, "--mac-ip", MAC]) == 0
    out = capsys.readouterr().out
    assert f"-RemoteAddresses '{MAC}'" in out and "ray start --head" in out
    assert cli.main(["head", "--ip", HEAD, "--mac-ip", "mac"]) == 2
    assert capsys.readouterr().err.startswith("HetlabError: the Mac's IP 'mac' is not an IP address")


# --- the Mac's pmset output (SUPPLIED: macOS 15 on an M2 MacBook Air; no Mac here) ---
PMSET_G = """System-wide power settings:
Currently in use:
 standby              1
 Sleep On Power Button 1
 hibernatefile        /var/vm/sleepimage
 powernap             1
 networkoversleep     0
 disksleep            10
 sleep                1 (sleep prevented by coreaudiod)
 hibernatemode        3
 ttyskeepawake        1
 displaysleep         2
 tcpkeepalive         1
 lowpowermode         0
 womp                 0
"""
PMSET_BATT_AC = "Now drawing from 'AC Power'\n -InternalBattery-0 (id=4653155)\t100%; charged; 0:00 remaining present: true\n"
PMSET_BATT_BATTERY = "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=4653155)\t83%; discharging; 7:41 remaining present: true\n"


def test_the_macs_sleep_and_power_source_are_read_from_pmset():
    [sleep] = doctor.mac_sleep_check(PMSET_G, PMSET_BATT_BATTERY)
    assert sleep.status == doctor.WARN and "on battery" in sleep.detail and "1 min" in sleep.detail
    assert "caffeinate -dims" in sleep.fix and "charger" in sleep.fix
    awake = doctor.mac_sleep_check(PMSET_G.replace("sleep                1 (sleep prevented by coreaudiod)",
                                                   "sleep                0"), PMSET_BATT_AC)
    assert [c.status for c in awake] == [doctor.OK]
    assert doctor.mac_sleep_check(None, None) == []            # pmset absent or silent: nothing claimed
    assert doctor.mac_sleep_check("displaysleep 2\n disksleep 10\n", None) == []   # no system sleep line




def test_notebook_04_inside_wsl_prints_and_checks_the_powershell_rules_not_ufw(monkeypatch, capsys):
    """Notebook 04's own cells (imports, the desktop's lines, their check, the Mac's lines, their
    check) run here with WSL's signs SUPPLIED (no Windows here: ``wsl.in_wsl`` says yes). They print part B's firewall rules, Ray Train's among them, without
    its `wsl --shutdown`, no ufw; the Mac's first line takes the token typed, since WSL has no SSH
    server the Mac reaches."""
    import json
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "04_build_your_cluster.ipynb").read_text())
    cells = {c.get("id"): "".join(c["source"]) for c in nb["cells"]}
    monkeypatch.setattr(windows, "in_wsl", lambda: True)
    scope = {"DESKTOP_IP": HEAD, "MAC_IP": MAC, "display": print}
    for cell in ("2b72787b", "a65aed84", "ebf8b303", "dce64ea2", "338135b1"):
        exec(compile(cells[cell], f"04:{cell}", "exec"), scope)      # noqa: S102 - the notebook's own cells
    printed = capsys.readouterr().out
    pasted = commands.pasted(scope["head_text"])
    assert scope["WINDOWS"] and not any("ufw" in line or "wsl --shutdown" in line for line in pasted)
    [(where_b, rules), (where_c, head)] = commands.blocks(scope["head_text"])
    assert "PowerShell" in where_b and "Ubuntu" in where_c
    made = [(n, p["DisplayName"]) for n, p in _bound(rules) if n.startswith("New-")]
    assert [name for _, name in made] == [[windows.RULE]] * 2 + [[windows.TRAIN_RULE]] * 2   # 07's, runnable
    assert "-LocalPort '6386' " in rules and commands.steps(head)[-1] == "ray get-auth-token"   # shown, to type
    assert commands.pasted(scope["join_text"])[0].startswith("mkdir -p ~/.ray && (umask 077 && read -rs TOKEN")
    assert "ssh " not in scope["join_text"] and "New-NetFirewallRule" in printed
    monkeypatch.setattr(windows, "in_wsl", lambda: False)                     # on the Mac, from a terminal
    assert cli.main(["join", "--head", HEAD, "--ip", MAC, "--head-wsl"]) == 0
    assert commands.steps(capsys.readouterr().out)[0] == commands.pasted(scope["join_text"])[0]   # stdout: the block


def _powershell_blocks() -> list[str]:
    """Every PowerShell block a learner is given: the printed Windows steps' (head, join, notebook 04's
    rules) and the docs' ```powershell blocks (the teardown's among them)."""
    root = Path(__file__).resolve().parents[1]
    printed = [windows.render_head(HEAD, MAC), windows.render_head(HEAD), windows.notebook_head(HEAD, MAC)]
    blocks = [code for text in printed for where, code in commands.blocks(text) if "PowerShell" in where]
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return blocks + [code for page in pages
                     for code in re.findall(r"```powershell\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)]


def test_every_powershell_block_is_complete_lines_that_parse_and_bind():
    """What is checked, for every PowerShell block (``_powershell_blocks``): the block parses with
    tree-sitter's PowerShell grammar, and so does each of its lines alone (each line a complete command:
    pasted whole or line by line, the same commands run); no line is a comment (nothing to remove before
    it runs, no command hidden behind a #); each cmdlet in pwsh_grammar's table (the firewall cmdlets,
    Test-Path, Remove-Item, Out-File) binds its parameters as Microsoft's reference says. What is NOT
    checked, since no Windows is here: the arguments of external programs (powercfg, wsl) beyond their
    syntax, anything PowerShell decides at run time (a rule that exists, Administrator rights), and
    differences between Windows PowerShell 5.1 and PowerShell 7."""
    blocks = _powershell_blocks()
    assert len(blocks) >= 4 and any("Ray Train" in b for b in blocks)
    for block in blocks:
        _bound(block)
        for line in block.splitlines():
            assert line.strip() and not line.lstrip().startswith("#"), (line, block)
            assert pwsh.parse(line), line                       # a complete command by itself
    with pytest.raises(AssertionError):                         # the check refuses half a command
        pwsh.parse("if (-not (Test-Path 'x')) {")
