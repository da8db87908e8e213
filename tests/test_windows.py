"""A Windows desktop (WSL2) and a Mac's power for a long run: hetlab.windows and the doctor's OS checks.

No Windows machine and no Mac exist here. Every WSL sign below (kernel release strings, WSL's
environment variables, addresses and MAC prefixes, ``wslinfo`` output, ``.wslconfig`` text) and
every ``pmset`` output is SUPPLIED by the test, written as those machines print them; each test
also runs the same functions on this machine's own signs, where they must find no WSL.
"""
import re
import shlex
from pathlib import Path

import pytest

from hetlab import HetlabError, commands, windows
from hetlab.commands import Ports
from hetlab.tools import cli, oschecks, preflight

# --- supplied signs (not this machine's) ---
WSL2_RELEASE = "5.15.153.1-microsoft-standard-WSL2"   # uname -r in WSL 2 (Ubuntu on Windows 11)
WSL1_RELEASE = "4.4.0-19041-Microsoft"                # uname -r in WSL 1
LINUX_RELEASE = "6.8.0-45-generic"                    # a plain Ubuntu desktop
WSL_ENV = {"WSL_DISTRO_NAME": "Ubuntu", "WSL_INTEROP": "/run/WSL/1_interop"}
NAT_IP, NAT_MAC = "172.27.240.5", "00:15:5d:4a:0b:01"  # WSL's NAT: 172.16/12 on a Hyper-V adapter
LAN_IP, LAN_MAC = "192.168.1.10", "a8:a1:59:12:34:56"  # mirrored: Windows' own adapter and address
PROC_NET_ROUTE = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                  "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
                  "eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
GOOD_WSLCONFIG = "[wsl2]\nmemory=16GB\nnetworkingMode=Mirrored\nvmIdleTimeout=-1\n\n[general]\ninstanceIdleTimeout=-1\n"
HEAD, MAC = "192.168.1.10", "192.168.1.20"


def test_wsl_is_recognised_from_its_signs_and_this_machine_is_not_wsl():
    assert windows.is_wsl(WSL2_RELEASE, {}) and windows.is_wsl(WSL1_RELEASE, {})
    assert windows.is_wsl(LINUX_RELEASE, {"WSL_DISTRO_NAME": "Ubuntu"})
    assert windows.is_wsl(LINUX_RELEASE, {"WSL_INTEROP": "/run/WSL/1_interop"})
    assert windows.is_wsl(LINUX_RELEASE, {}, interop=True)
    assert not windows.is_wsl(LINUX_RELEASE, {"PATH": "/usr/bin"})
    assert (windows.wsl_version(WSL2_RELEASE), windows.wsl_version(WSL1_RELEASE)) == (2, 1)
    assert not windows.in_wsl()                                   # this machine (real signs)
    assert windows.local_signs()["platform"] != "win32"


def test_mirrored_and_nat_networking_are_told_apart():
    assert windows.networking_mode("mirrored\n", NAT_IP, NAT_MAC) == "mirrored"   # wslinfo decides
    assert windows.networking_mode("nat\n", LAN_IP, LAN_MAC) == "nat"
    assert windows.networking_mode(None, NAT_IP, NAT_MAC) == "nat"
    assert windows.networking_mode(None, NAT_IP, None) == "nat"
    assert windows.networking_mode(None, LAN_IP, LAN_MAC) == "mirrored"
    assert windows.networking_mode("", "172.20.0.7", LAN_MAC) == "mirrored"  # a LAN that uses 172.16/12
    assert windows.networking_mode(None, None) == "unknown"
    assert windows.default_route_interface(PROC_NET_ROUTE) == "eth0"
    assert windows.default_route_interface(PROC_NET_ROUTE.splitlines()[0]) is None
    real = Path("/proc/net/route").read_text()                    # this machine's own table
    name = windows.default_route_interface(real)
    assert name is None or name in real


def test_wslconfig_round_trip_and_missing_keys():
    assert windows.wslconfig_missing(windows.parse_wslconfig(GOOD_WSLCONFIG)) == []
    written = "\n".join(windows.wslconfig_lines())               # what the printed Set-Content writes
    assert windows.wslconfig_missing(windows.parse_wslconfig(written)) == []
    nat = windows.parse_wslconfig("[wsl2]\n# networkingMode=mirrored\nmemory=8GB\n")
    assert windows.wslconfig_missing(nat) == ["wsl2.networkingMode=mirrored", "wsl2.vmIdleTimeout=-1",
                                              "general.instanceIdleTimeout=-1"]


# Each cmdlet's parameters as Microsoft documents them (learn.microsoft.com/powershell/module/
# netsecurity/new-netfirewallhypervrule, .../new-netfirewallrule, .../remove-netfirewall*rule;
# .../microsoft.powershell.management/set-content): a printed parameter outside these is a typo.
DOCUMENTED = {
    "New-NetFirewallHyperVRule": {"DisplayName", "Name", "RulePriority", "Direction", "VMCreatorId", "Protocol",
                                  "LocalAddresses", "LocalPorts", "RemoteAddresses", "RemotePorts", "Action",
                                  "Enabled", "Profiles"},
    "New-NetFirewallRule": {"DisplayName", "Name", "Description", "Group", "Enabled", "Profile", "Direction",
                            "Action", "LocalAddress", "RemoteAddress", "Protocol", "LocalPort", "RemotePort",
                            "Program", "Service", "InterfaceAlias", "InterfaceType"},
    "Remove-NetFirewallHyperVRule": {"DisplayName", "Name"},
    "Remove-NetFirewallRule": {"DisplayName", "Name"},
    "Set-Content": {"Path", "Value", "Encoding"},
}


def powershell(text: str) -> list[tuple[str, dict[str, list[str]]]]:
    """``text`` parsed by tree-sitter's PowerShell grammar: each command's name and its
    ``-Parameter`` values (string literals unquoted); a syntax error fails the test."""
    import tree_sitter_powershell
    from tree_sitter import Language, Parser
    src = text.encode()
    tree = Parser(Language(tree_sitter_powershell.language())).parse(src)
    nodes, errors, found = [tree.root_node], [], []
    while nodes:
        node = nodes.pop(0)
        if node.type == "ERROR" or node.is_missing:
            errors.append(src[node.start_byte:node.end_byte].decode())
        if node.type == "command":
            found.append(_bind(node, src))
        nodes = list(node.children) + nodes
    assert errors == [], errors
    return found


def _bind(command, src: bytes) -> tuple[str, dict[str, list[str]]]:
    name = src[command.child_by_field_name("command_name").start_byte:
               command.child_by_field_name("command_name").end_byte].decode()
    params, current = {}, None
    elements = command.child_by_field_name("command_elements")
    for element in ([] if elements is None else elements.children):
        text = src[element.start_byte:element.end_byte].decode()
        if element.type == "command_parameter":
            current = text.lstrip("-")
            params[current] = []
        elif element.type != "command_argument_sep":
            values = [src[n.start_byte:n.end_byte].decode().strip("'\"")
                      for n in _leaves(element) if n.type in ("verbatim_string_characters",
                                                            "expandable_string_literal", "generic_token")]
            params.setdefault(current, []).extend(values or [text])
    return name, params


def _leaves(node):
    if node.type in ("verbatim_string_characters", "expandable_string_literal", "generic_token"):
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _ports(ranges: list[str]) -> set[int]:
    found = set()
    for r in ranges:
        low, _, high = r.partition("-")
        found |= set(range(int(low), int(high or low) + 1))
    return found


def _windows_part(text: str, uncomment: bool = False) -> str:
    """The PowerShell part of ``hetlab head --windows``; ``uncomment`` also runs the Ray Train rules."""
    part = text.split("\n\n", 1)[0]
    return "\n".join(line[len("#    "):] if uncomment and line.startswith("#    New-Net") else line
                     for line in part.splitlines())


def test_the_parser_sees_a_broken_line():
    with pytest.raises(AssertionError):
        powershell("New-NetFirewallRule -DisplayName 'hetlab Ray -Direction Inbound\n")
    assert powershell("wsl --shutdown\npowercfg /change standby-timeout-ac 0\n") == [
        ("wsl", {"shutdown": []}), ("powercfg", {None: ["/change", "standby-timeout-ac", "0"]})]


@pytest.mark.parametrize("ports", [Ports(), Ports(gcs=7379, node_manager=7380, min_worker=11000, max_worker=11040)])
def test_powershell_rules_open_exactly_the_heads_ports_to_the_mac_only(ports):
    """As the ufw tests do: the ports in each rule are exactly those the head listens on for the Mac."""
    text = windows.render_head(HEAD, MAC, ports)
    commands_run = powershell(_windows_part(text, uncomment=True))
    for name, params in commands_run:
        if name in DOCUMENTED:
            assert set(params) <= DOCUMENTED[name], (name, sorted(set(params) - DOCUMENTED[name]))
    rules = [(name, params) for name, params in commands_run if name.startswith("New-NetFirewall")]
    assert [(name, params["DisplayName"]) for name, params in rules] == [
        ("New-NetFirewallHyperVRule", [windows.RULE]), ("New-NetFirewallRule", [windows.RULE]),
        ("New-NetFirewallHyperVRule", [windows.TRAIN_RULE]), ("New-NetFirewallRule", [windows.TRAIN_RULE])]
    for name, params in rules:
        hyperv = name == "New-NetFirewallHyperVRule"
        local = params["LocalPorts" if hyperv else "LocalPort"]
        if params["DisplayName"] == [windows.RULE]:
            assert _ports(local) == set(ports.listening(head=True))
            assert not _ports(local) & set(ports.local_only(head=True))  # dashboard, metrics stay closed
        else:
            assert local == [str(ports.train_rendezvous), "32768-60999"]
        assert params["RemoteAddresses" if hyperv else "RemoteAddress"] == [MAC]  # the Mac, nobody else
        assert (params["Direction"], params["Protocol"], params["Action"]) == (["Inbound"], ["TCP"], ["Allow"])
        assert params.get("VMCreatorId") == ([windows.WSL_VM_CREATOR] if hyperv else None)
    assert windows.WSL_VM_CREATOR == "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"  # WSL's, in Microsoft's docs
    [(_, written)] = [(n, p) for n, p in commands_run if n == "Set-Content"]
    assert written["Value"] == windows.wslconfig_lines() and written["Encoding"] == ["ascii"]
    assert [(n, p) for n, p in commands_run if n not in DOCUMENTED] == [
        ("wsl", {"update": []}), ("wsl", {"shutdown": []}),
        ("powercfg", {None: ["/change", "standby-timeout-ac", "0"]}),
        ("powercfg", {None: ["/change", "hibernate-timeout-ac", "0"]})]


def test_the_wsl_head_runs_the_linux_heads_ray_start_line():
    text = windows.render_head(HEAD, MAC, ephemeral=(60000, 61000))
    linux = commands.render_head(HEAD)
    start = next(line for line in linux.splitlines() if " ray start --head" in line)
    assert start in text.splitlines()
    assert "--node-ip-address=192.168.1.10" in start and "sudo ufw" not in text
    assert "6386','60000-61000'" in text                           # WSL's own ephemeral range
    for step in ("networkingMode=mirrored", "wsl --shutdown", "powercfg /change standby-timeout-ac 0",
                 "Set-Content -Path \"$env:USERPROFILE\\.wslconfig\"", "ray get-auth-token --generate"):
        assert step in text, step
    assert "WSL's NAT" in windows.render_head(NAT_IP, MAC) and "WSL's NAT" not in text
    assert "-RemoteAddresses 'MAC_IP'" in windows.render_head(HEAD) and "'MAC_IP'" not in text
    with pytest.raises(HetlabError) as info:
        windows.render_head(HEAD, "my-mac.local")
    assert "\n" not in str(info.value) and "the Mac's IP" in str(info.value)


def test_head_prints_linux_steps_here_windows_steps_when_asked_and_refuses_native_windows(capsys):
    assert windows.head_flavour("linux", wsl=False, asked=False) == "linux"
    assert windows.head_flavour("linux", wsl=True, asked=False) == "windows"   # inside WSL (supplied)
    assert windows.head_flavour("win32", wsl=False, asked=True) == "windows"
    with pytest.raises(HetlabError) as info:                                   # native Windows (supplied)
        windows.head_flavour("win32", wsl=False, asked=False)
    assert "inside WSL2" in str(info.value) and "CPU build" in str(info.value)
    assert cli.main(["head", "--ip", HEAD]) == 0                               # this machine: Linux
    assert "New-NetFirewall" not in capsys.readouterr().out
    assert cli.main(["head", "--ip", HEAD, "--windows", "--mac-ip", MAC]) == 0
    out = capsys.readouterr().out
    assert f"-RemoteAddresses '{MAC}'" in out and "ray start --head" in out
    assert cli.main(["head", "--ip", HEAD, "--windows", "--mac-ip", "mac"]) == 2
    assert capsys.readouterr().err.startswith("HetlabError: the Mac's IP 'mac' is not an IP address")


def _wsl_signs(**changes):
    signs = {"platform": "linux", "release": WSL2_RELEASE, "env": WSL_ENV, "interop": True, "dxg": True,
             "wslinfo": "mirrored\n", "route_ip": LAN_IP, "route_mac": LAN_MAC,
             "linux_nvidia_smi": False, "wslconfig": GOOD_WSLCONFIG}
    return {**signs, **changes}


def test_doctor_in_wsl_names_each_problem_with_its_fix():
    good = oschecks.wsl_checks(_wsl_signs())
    assert [c.name for c in good] == ["WSL", "WSL networking", "WSL GPU", "WSL idle shutdown"]
    assert all(c.status == preflight.OK for c in good), [str(c) for c in good]
    [nat] = [c for c in oschecks.wsl_checks(_wsl_signs(wslinfo=None, route_ip=NAT_IP, route_mac=NAT_MAC))
             if c.name == "WSL networking"]
    assert nat.status == preflight.FAIL and NAT_IP in nat.detail
    assert "networkingMode=mirrored" in nat.fix and "wsl --shutdown" in nat.fix and "22H2" in nat.fix
    [wsl1] = oschecks.wsl_checks(_wsl_signs(release=WSL1_RELEASE))
    assert wsl1.status == preflight.FAIL and "wsl --set-version Ubuntu 2" in wsl1.fix
    no_gpu = {c.name: c for c in oschecks.wsl_checks(_wsl_signs(dxg=False))}["WSL GPU"]
    assert no_gpu.status == preflight.WARN and "Windows driver" in no_gpu.fix and "not in WSL" in no_gpu.fix
    linux_driver = {c.name: c for c in oschecks.wsl_checks(_wsl_signs(linux_nvidia_smi=True))}["WSL GPU"]
    assert linux_driver.status == preflight.WARN and "remove the Linux NVIDIA driver" in linux_driver.fix
    idle = {c.name: c for c in oschecks.wsl_checks(_wsl_signs(wslconfig="[wsl2]\nnetworkingMode=mirrored\n"))}
    assert idle["WSL idle shutdown"].status == preflight.WARN
    assert "general.instanceIdleTimeout=-1" in idle["WSL idle shutdown"].detail
    assert "networkingMode" not in idle["WSL idle shutdown"].detail  # the networking check's business
    unread = {c.name: c for c in oschecks.wsl_checks(_wsl_signs(wslconfig=None))}["WSL idle shutdown"]
    assert unread.status == preflight.WARN and "vmIdleTimeout=-1" in unread.fix
    assert oschecks.wsl_checks(windows.local_signs()) == []       # this machine: no WSL
    assert oschecks.os_checks("Linux") == []


def test_native_windows_and_a_cpu_torch_beside_an_nvidia_card_say_what_to_do():
    [native] = oschecks.native_windows_check("win32")              # supplied platform
    assert native.status == preflight.FAIL and "inside WSL2" in native.detail
    assert "wsl --install -d Ubuntu" in native.fix
    assert oschecks.native_windows_check("linux") == []
    on_windows = preflight.accelerator_check("cpu; accelerator: none", False, "Windows", "AMD64", True, None)
    assert on_windows.status == preflight.WARN and "CPU build" in on_windows.detail
    assert "WSL2" in on_windows.fix and "PyTorch's own index" in on_windows.fix
    in_wsl = preflight.accelerator_check("cpu; accelerator: none", False, "WSL", "x86_64", True, "12.8")
    assert in_wsl.status == preflight.WARN and "12.8" in in_wsl.detail
    assert "Windows driver" in in_wsl.fix and "no Linux NVIDIA driver inside WSL" in in_wsl.fix
    assert preflight.accelerator_check("cuda", True, "WSL", "x86_64", True, "12.8").status == preflight.OK


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
    assert oschecks.pmset_sleep(PMSET_G) == 1 and oschecks.pmset_sleep(PMSET_G.replace("sleep                1", "sleep                0")) == 0
    assert oschecks.pmset_sleep("displaysleep 2\n disksleep 10\n") is None   # no system sleep line
    assert oschecks.pmset_source(PMSET_BATT_AC) == "AC Power"
    assert oschecks.pmset_source(PMSET_BATT_BATTERY) == "Battery Power"
    power, sleep = oschecks.mac_power_checks(PMSET_G, PMSET_BATT_BATTERY)
    assert power.status == preflight.WARN and "charger" in power.fix
    assert sleep.status == preflight.WARN and "1 min" in sleep.detail
    assert "caffeinate -dims" in sleep.fix and "sudo pmset -c sleep 0" in sleep.fix
    awake = oschecks.mac_power_checks(PMSET_G.replace("sleep                1 (sleep prevented by coreaudiod)",
                                                      "sleep                0"), PMSET_BATT_AC)
    assert [c.status for c in awake] == [preflight.OK, preflight.OK]
    assert oschecks.mac_power_checks(None, None) == []           # pmset absent or silent: nothing claimed


def test_the_printed_lines_quote_nothing_a_shell_would_break():
    """The WSL part is bash: each command line splits cleanly (balanced quotes)."""
    text = windows.render_head(HEAD, MAC)
    wsl_part = text.split("\n\n", 1)[1]
    for line in wsl_part.splitlines():
        if line and not line.startswith("#"):
            shlex.split(line)
    assert windows.RULE in text


def test_the_windows_undo_steps_parse_and_name_documented_parameters():
    page = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    [undo] = re.findall(r"```powershell\n(.*?)```", page, flags=re.S)
    ran = powershell(undo)
    removed = [(name, params["DisplayName"]) for name, params in ran if name.startswith("Remove-")]
    assert sorted(removed) == sorted((f"Remove-{kind}", [rule]) for kind in ("NetFirewallHyperVRule", "NetFirewallRule")
                                     for rule in (windows.RULE, windows.TRAIN_RULE))
    for name, params in ran:
        if name in DOCUMENTED:
            assert set(params) <= DOCUMENTED[name], (name, params)
