"""The steps a Windows desktop's learner pastes: ``hetlab head --windows``, ``hetlab join --windows``
and the Windows teardown (README, "Windows desktop"; notebook 04).

Three parts, in order: (A) in Ubuntu, ``hetlab wslconfig``; (B) in PowerShell as Administrator
(``powershell_steps``); (C) in Ubuntu again, the node's steps as on Linux. Each command follows
Microsoft's pages (NetSecurity cmdlets, WSL, powercfg); tests/test_windows.py binds them to that table.
"""
from __future__ import annotations

import ipaddress
import re

from hetlab.cluster import commands
from hetlab.windows import wsl, wslconfig
from hetlab.errors import HetlabError

RULE = "hetlab Ray"                # display name of the firewall rules for Ray's pinned ports
TRAIN_RULE = "hetlab Ray Train"    # ... and for Ray Train's rendezvous and gloo (notebook 07)
POWER_RECORD = "hetlab-power-before.txt"   # in %UserProfile%: powercfg's sleep settings before hetlab's
POWER_SETTINGS = {"STANDBYIDLE": "standby-timeout-ac", "HIBERNATEIDLE": "hibernate-timeout-ac"}
# powercfg /query prints each setting under its GUID (powercfg /aliases): sleep after, hibernate after
POWER_GUIDS = {"STANDBYIDLE": "29f6c1db-86da-48c5-9fdb-f2b67b1f44da",
               "HIBERNATEIDLE": "9d7815a6-7ee4-497e-8888-515a05f02364"}
PROFILE = '"$env:USERPROFILE\\'


def flavour(platform_name: str, in_wsl: bool, asked: bool, command: str = "head") -> str:
    """What ``hetlab head`` / ``hetlab join`` prints: ``"windows"`` (inside WSL, or ``--windows``) or
    the plain steps; native Windows without ``--windows`` is refused in one line."""
    if asked or in_wsl:
        return "windows"
    if platform_name == "win32":
        raise HetlabError(f"hetlab {command} on {wsl.NATIVE}: run it inside WSL, or `hetlab {command} "
                          f"--windows ...` prints the Windows steps.")
    return "plain"


def _ps_list(values: list[str]) -> str:
    return ",".join(f"'{v}'" for v in values)  # quoted, comma-separated: one String[] argument


def firewall_rules(name: str, ranges: list[str], remote: str) -> list[str]:
    """The PowerShell that (re)makes the two rules admitting TCP ``ranges`` from ``remote`` only:
    the Hyper-V firewall's (WSL's VM creator) and Windows Defender Firewall's. Each is removed
    first, silently if absent, so pasting twice leaves one rule of each."""
    ports, address = _ps_list(ranges), _ps_list([remote])
    return [f"Remove-NetFirewallHyperVRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
            f"New-NetFirewallHyperVRule -DisplayName '{name}' -Direction Inbound -VMCreatorId "
            f"'{wsl.WSL_VM_CREATOR}' -Protocol TCP -LocalPorts {ports} -RemoteAddresses {address} -Action Allow",
            f"Remove-NetFirewallRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
            f"New-NetFirewallRule -DisplayName '{name}' -Direction Inbound -Protocol TCP "
            f"-LocalPort {ports} -RemoteAddress {address} -Action Allow"]


def train_ranges(ports: commands.Ports, ephemeral: tuple[int, int]) -> list[str]:
    """Ray Train's ports on the Windows desktop: rank 0's rendezvous (rank 0 runs on the desktop role,
    head or not: ``raytrain_config.scaling_config``), and gloo's listeners on WSL's ephemeral ports
    (gloo binds port 0: torch offers no way to pin them; pytorch/gloo issue 54)."""
    return [str(ports.train_rendezvous), f"{ephemeral[0]}-{ephemeral[1]}"]


def powershell_steps(remote_ip: str | None, ports: commands.Ports = commands.Ports(),
                     ephemeral: tuple[int, int] = commands.EPHEMERAL_PORTS["linux"], head: bool = True,
                     again: str = "hetlab head") -> list[str]:
    """Part B, run once in PowerShell as Administrator: both firewalls for exactly this node's ports
    from the other machine only (each rule removed first, so pasting again replaces it), no sleep on
    AC power (old values saved once), then WSL updated and restarted so that it reads ``.wslconfig``
    (``wsl --shutdown`` last: it closes every Ubuntu window)."""
    other = "the Mac" if head else "the Mac (the head)"
    remote = "MAC_IP" if remote_ip is None else commands.check_ip(remote_ip, "the Mac's IP")
    ranges = commands.firewall_ranges(ports, head=head)
    train = train_ranges(ports, ephemeral)
    record = f'{PROFILE}{POWER_RECORD}"'
    return [
        "# B) On Windows, in PowerShell as Administrator (Start, type PowerShell, Run as administrator).",
        *(["#    replace MAC_IP below with the Mac's LAN address (macOS: ipconfig getifaddr en0)"]
          if remote_ip is None else []),
        f"# 1) firewalls: TCP {' '.join(ranges)} from {other} only, in the Hyper-V firewall (inbound to WSL) "
        f"and Windows Defender Firewall (pasting again replaces them):",
        *firewall_rules(RULE, ranges, remote),
        f"#    Ray Train (notebook 07) only: also TCP {' '.join(train)} (rank 0's rendezvous, here, and gloo on "
        f"WSL's ephemeral ports, read just now; WSL may move them when it restarts, and `hetlab doctor` then "
        f"says so); remove the leading # to run these:",
        *[f"#    {line}" for line in firewall_rules(TRAIN_RULE, train, remote)],
        *([f"#    keep {', '.join(str(p) for p in ports.local_only(head=True))} closed (dashboard and "
           f"metrics: local use only)"] if head else []),
        "# 2) no sleep or hibernation on the charger during a run; your settings are saved first (once), "
        "for the teardown:",
        f"if (-not (Test-Path {record})) {{ powercfg /query SCHEME_CURRENT SUB_SLEEP | Out-File -Encoding ascii {record} }}",
        *[f"powercfg /change {name} 0" for name in POWER_SETTINGS.values()],
        "# 3) WSL up to date (mirrored networking needs WSL 2.0 or newer), then restarted so that it reads",
        f"#    .wslconfig. This closes every Ubuntu window, this one too: open Ubuntu again, run "
        f"`hetlab doctor`, then `{again} ...` again for part C.",
        "wsl --update",
        "wsl --shutdown",
    ]


def _part_a(build: int | None) -> list[str]:
    checked = (f"this Windows is build {build}: fine" if build is not None
               else "`winver` on Windows shows the version")
    return ["# A) Windows 11 22H2 or newer (build 22621+) is needed: " + checked + ".",
            "#    In this Ubuntu window first: WSL's settings ("
            + ", ".join(line for line in wslconfig.lines() if not line.startswith("[")) + ") go into %UserProfile%\\.wslconfig; your other settings stay, and the old file is kept in "
            ".wslconfig" + wslconfig.BACKUP_SUFFIX + ":",
            "hetlab wslconfig"]


def _check_build(build: int | None) -> None:
    problem = wsl.build_problem(build)
    if problem:
        raise HetlabError(problem)


def render_head(ip: str, mac_ip: str | None = None, ports: commands.Ports = commands.Ports(),
                ephemeral: tuple[int, int] = commands.EPHEMERAL_PORTS["linux"], build: int | None = None,
                **options) -> str:
    """``hetlab head --windows``: parts A (Ubuntu), B (PowerShell) and C (the head's steps inside
    WSL, as on a Linux desktop, with Windows' LAN address). ``build``: Windows' build where known;
    below 22621 a one-line HetlabError, since no setting makes the Mac reach WSL there."""
    _check_build(build)
    inside = commands.render_head(
        ip, ports, where="C) Inside WSL (Ubuntu) on the Windows desktop, the head",
        firewall=["# 2) firewall: the PowerShell rules of part B (WSL needs no ufw); --node-ip-address is "
                  "Windows' LAN address, which mirrored mode shares with WSL"], **options)
    return "\n".join([*_part_a(build), "", *powershell_steps(mac_ip, ports, ephemeral), "", *_nat_note(ip), inside,
                      "# keep this Ubuntu window open during a run (older WSL ignores instanceIdleTimeout "
                      "and stops the distro a while after its last window closes)"])


def render_join(head_ip: str, ip: str | None, ports: commands.Ports = commands.Ports(),
                ephemeral: tuple[int, int] = commands.EPHEMERAL_PORTS["linux"], build: int | None = None,
                **options) -> str:
    """``hetlab join --windows``: a Windows desktop (WSL2) joins a Mac that is the head. The same
    parts as ``render_head``; part B admits this node's ports from the Mac's address only."""
    _check_build(build)
    inside = commands.render_join(
        head_ip, ip, ports, mac=False, head="Mac",
        where="C) Inside WSL (Ubuntu) on the Windows desktop, joining the Mac's head",
        firewall=["# 2) firewall: the PowerShell rules of part B (WSL needs no ufw); --node-ip-address is "
                  "Windows' LAN address, which mirrored mode shares with WSL"], **options)
    return "\n".join([*_part_a(build), "", *powershell_steps(head_ip, ports, ephemeral, head=False,
                                                             again="hetlab join"), "",
                      *(_nat_note(ip) if ip else []), inside])


def _nat_note(ip: str) -> list[str]:
    if ipaddress.ip_address(commands.check_ip(ip, "this machine's IP")) not in wsl.NAT_NET:
        return []
    return [f"# note: {ip} is in 172.16/12, where WSL's NAT puts WSL: if it is WSL's own address, the Mac "
            f"cannot reach it; after part B, give Windows' LAN address (ipconfig) to --ip"]


def power_before(query: str | None) -> dict[str, int]:
    """The AC values (seconds) of sleep and hibernate from ``powercfg /query SCHEME_CURRENT SUB_SLEEP``'s
    text: each setting's block starts at its GUID (its alias, STANDBYIDLE or HIBERNATEIDLE, follows),
    and its last two hex numbers are AC, then DC; the labels vary with Windows' language, these do not."""
    found = {}
    blocks = re.split(r"(?im)^.*?:\s*([0-9a-f-]{36})", query or "")
    for guid, block in zip(blocks[1::2], blocks[2::2]):
        name = next((n for n, g in POWER_GUIDS.items()
                     if g == guid.lower() or re.search(rf"^\s*\S.*:\s*{n}\s*$", block, flags=re.M)), None)
        values = re.findall(r"0x([0-9a-fA-F]+)", block)
        if name and len(values) >= 2:
            found[name] = int(values[-2], 16)
    return found


def undo_steps(before: dict[str, int] | None = None) -> list[str]:
    """The PowerShell teardown, in order: both rules gone (silently if never added), the sleep
    settings as saved before hetlab's (``before``; else Windows' Settings), WSL restarted last."""
    lines = ["# On Windows, in PowerShell as Administrator; the Ray Train lines are harmless if you never added them:"]
    for name in (RULE, TRAIN_RULE):
        lines += [f"Remove-NetFirewallHyperVRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
                  f"Remove-NetFirewallRule -DisplayName '{name}' -ErrorAction SilentlyContinue"]
    if before and set(before) == set(POWER_SETTINGS):
        lines += ["# sleep and hibernation on the charger as they were before hetlab's steps:"]
        lines += [f"powercfg /setacvalueindex SCHEME_CURRENT SUB_SLEEP {name} {before[name]}" for name in POWER_SETTINGS]
        lines += ["powercfg /setactive SCHEME_CURRENT", f'Remove-Item {PROFILE}{POWER_RECORD}"']
    else:
        lines += [f"# no saved sleep settings ({POWER_RECORD}): set them in Settings > System > Power, or e.g. "
                  f"powercfg /change standby-timeout-ac 30 (minutes)"]
    return lines + ["# last, since it closes every Ubuntu window: WSL restarted, so that it reads the restored .wslconfig",
                    "wsl --shutdown"]
