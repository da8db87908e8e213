"""The steps a Windows desktop's learner pastes: ``hetlab head --windows`` and the
Windows teardown (README, "Windows desktop"; notebook 04).

Three parts, in order: (A) in Ubuntu, ``hetlab wslconfig``; (B) in PowerShell as Administrator
(``powershell_steps``); (C) in Ubuntu again, the node's steps as on Linux. Each command follows
Microsoft's pages (NetSecurity cmdlets, WSL, powercfg); tests/test_windows.py binds them to that table.
"""
from __future__ import annotations

import ipaddress
import re

from hetlab.cluster import commands
from hetlab.windows import wsl
from hetlab.errors import HetlabError

RULE = "hetlab Ray"                # display name of the firewall rules for Ray's pinned ports
TRAIN_RULE = "hetlab Ray Train"    # ... and for Ray Train's rendezvous store (notebook 07)
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


def powershell_steps(remote_ip: str | None, ports: commands.Ports = commands.Ports(),
                     head: bool = True, again: str = "hetlab head", only_firewall: bool = False) -> str:
    """Part B, run once in PowerShell as Administrator, as notes and one block: both firewalls for
    exactly this node's ports from the other machine only, Ray Train's rules (named ``TRAIN_RULE``,
    for notebook 07) among them (each rule removed first, so pasting again replaces it); no sleep on AC
    power (old values saved once), then WSL updated and restarted so that it reads ``.wslconfig``
    (``wsl --shutdown`` last: it closes every Ubuntu window). ``only_firewall``: the rules alone
    (notebook 04, run from JupyterLab inside WSL, which ``wsl --shutdown`` would close)."""
    other = "the Mac" if head else "the Mac (the head)"
    remote = "MAC_IP" if remote_ip is None else commands.check_ip(remote_ip, "the Mac's IP")
    ranges = commands.firewall_ranges(ports, head=head)
    train = commands.train_ranges(ports, "desktop")   # rank 0 runs on the desktop, head or not
    record = f'{PROFILE}{POWER_RECORD}"'
    notes = [
        "B) On Windows, in PowerShell as Administrator (Start, type PowerShell, Run as administrator).",
        *(["   Replace MAC_IP in the block with the Mac's LAN address (macOS: ipconfig getifaddr en0)."]
          if remote_ip is None else []),
        f"1) firewalls: TCP {' '.join(ranges)} from {other} only, in the Hyper-V firewall (inbound to WSL) "
        f"and Windows Defender Firewall (pasting again replaces them). The rules named '{TRAIN_RULE}' are "
        f"Ray Train's (notebook 07): TCP {' '.join(train)} (rank 0's rendezvous store, here, which carries "
        f"the ranks' exchange too).",
        *([f"   {', '.join(str(p) for p in ports.local_only(head=True))} stay closed (dashboard and metrics: "
           f"local use only)."] if head else []),
    ]
    lines = [*firewall_rules(RULE, ranges, remote), *firewall_rules(TRAIN_RULE, train, remote)]
    if not only_firewall:
        notes += ["2) no sleep or hibernation on the charger during a run; your settings are saved first (once), "
                  "for the teardown.",
                  "3) WSL up to date (mirrored networking needs WSL 2.0 or newer), then restarted so that it reads "
                  f".wslconfig. This closes every Ubuntu window: open Ubuntu again, run `hetlab doctor`, then "
                  f"`{again} ...` again for part C."]
        lines += [f"if (-not (Test-Path {record})) {{ powercfg /query SCHEME_CURRENT SUB_SLEEP | Out-File -Encoding ascii {record} }}",
                  *[f"powercfg /change {name} 0" for name in POWER_SETTINGS.values()],
                  "wsl --update",
                  "wsl --shutdown"]
    return commands.block(notes, "PowerShell as Administrator, on Windows", lines)


def _part_a(build: int | None) -> str:
    checked = (f"this Windows is build {build}: fine" if build is not None
               else "`winver` on Windows shows the version")
    return commands.block(
        ["A) Windows 11 22H2 or newer (build 22621+) is needed: " + checked + ".",
         "   In this Ubuntu window first: WSL's settings ("
         + ", ".join(line for line in wsl.lines() if not line.startswith("["))
         + ") go into %UserProfile%\\.wslconfig; your other settings stay, and the old file is kept in "
         ".wslconfig" + wsl.BACKUP_SUFFIX + "."],
        "this Ubuntu window", ["hetlab wslconfig"])


def _check_build(build: int | None) -> None:
    problem = wsl.build_problem(build)
    if problem:
        raise HetlabError(problem)


WSL_FIREWALL = (["2) firewall: the PowerShell rules of part B (WSL needs no ufw); --node-ip-address is "
                 "Windows' LAN address, which mirrored mode shares with WSL."], [])


def head_inside(ip: str, mac_ip: str | None = None, ports: commands.Ports = commands.Ports(),
                where: str = "C) Inside WSL (Ubuntu) on the Windows desktop, the head", **options) -> str:
    """The head's steps inside WSL: no ufw (part B's rules), and the token shown to be typed on the
    Mac, which has no SSH route into WSL."""
    return commands.render_head(ip, ports, where=where, firewall=WSL_FIREWALL, mac_ip=mac_ip, token="by hand",
                                paste_into="the Ubuntu (WSL) terminal", **options)


def notebook_head(ip: str, mac_ip: str | None, ports: commands.Ports = commands.Ports()) -> str:
    """Notebook 04's desktop lines on a Windows desktop: part B's firewall rules alone (not its
    ``wsl --shutdown``, which would close the Ubuntu that runs JupyterLab), then the head's block."""
    return "\n\n".join([powershell_steps(mac_ip, ports, only_firewall=True),
                         head_inside(ip, mac_ip, ports, where="Then inside WSL (Ubuntu), the head")])


def render_head(ip: str, mac_ip: str | None = None, ports: commands.Ports = commands.Ports(),
                build: int | None = None, **options) -> str:
    """``hetlab head --windows``: parts A (Ubuntu), B (PowerShell) and C (the head's steps inside
    WSL, as on a Linux desktop, with Windows' LAN address), each notes and a block, a blank line
    apart. ``build``: Windows' build where known; below 22621 a one-line HetlabError, since no
    setting makes the Mac reach WSL there."""
    _check_build(build)
    inside = head_inside(ip, mac_ip, ports, **options)
    keep = ("Keep this Ubuntu window open during a run (older WSL ignores instanceIdleTimeout and stops the "
            "distro a while after its last window closes).")
    return "\n\n".join([_part_a(build), powershell_steps(mac_ip, ports),
                         "\n".join([*_nat_note(ip), keep, inside])])


def _nat_note(ip: str) -> list[str]:
    if ipaddress.ip_address(commands.check_ip(ip, "this machine's IP")) not in wsl.NAT_NET:
        return []
    return [f"Note: {ip} is in 172.16/12, where WSL's NAT puts WSL: if it is WSL's own address, the Mac "
            f"cannot reach it; after part B, give Windows' LAN address (ipconfig) to --ip."]


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
    """The PowerShell teardown's lines, in order: both rules gone (silently if never added), the sleep
    settings as saved before hetlab's (``before``; else none: ``undo_text`` says where), WSL restarted last."""
    lines = []
    for name in (RULE, TRAIN_RULE):
        lines += [f"Remove-NetFirewallHyperVRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
                  f"Remove-NetFirewallRule -DisplayName '{name}' -ErrorAction SilentlyContinue"]
    if before and set(before) == set(POWER_SETTINGS):
        lines += [f"powercfg /setacvalueindex SCHEME_CURRENT SUB_SLEEP {name} {before[name]}" for name in POWER_SETTINGS]
        lines += ["powercfg /setactive SCHEME_CURRENT", f'Remove-Item {PROFILE}{POWER_RECORD}"']
    return lines + ["wsl --shutdown"]


def undo_text(before: dict[str, int] | None = None) -> str:
    """``undo_steps`` as notes and one block to paste (``hetlab wslconfig --undo``)."""
    saved = (["The powercfg lines put sleep and hibernation on the charger back as they were before hetlab's steps."]
             if before and set(before) == set(POWER_SETTINGS) else
             [f"No saved sleep settings ({POWER_RECORD}): set them in Settings > System > Power, or e.g. "
              f"powercfg /change standby-timeout-ac 30 (minutes)."])
    return commands.block(["On Windows, in PowerShell as Administrator. The Ray Train lines are harmless if you "
                           "never added those rules.", *saved,
                           "The last line restarts WSL, so that it reads the restored .wslconfig: it closes every "
                           "Ubuntu window."], "PowerShell as Administrator, on Windows", undo_steps(before))
