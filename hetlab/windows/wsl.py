"""A Windows 11 desktop in the course, through WSL2 (README, "Windows desktop"; notebook 04): what WSL2
and Windows look like from inside WSL, what ``.wslconfig`` lacks, and the steps a learner pastes.

Natively on Windows Ray has no multi-node clusters and PyPI's torch is a CPU build (``NATIVE``); in
WSL2 Ubuntu the desktop is a Linux node if Windows has mirrored networking (``MIRRORED_MIN_BUILD``),
two firewalls let it in, and it stays awake. Inside WSL ``hetlab head`` prints three parts: (A) in
Ubuntu, ``hetlab wslconfig``; (B) in PowerShell as Administrator, both firewalls and no sleep on the
charger (``powershell_steps``); (C) in Ubuntu again, the node's steps as on Linux. Each command follows
Microsoft's pages (NetSecurity cmdlets, WSL, powercfg); tests/test_windows.py binds them to that table.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from hetlab.cluster import commands
from hetlab.errors import HetlabError

WSL_VM_CREATOR = "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"  # Get-NetFirewallHyperVVMCreator: "WSL"
INTEROP = Path("/proc/sys/fs/binfmt_misc/WSLInterop")
# Under WSL's default NAT the VM sits behind a 172.16/12 address the Mac cannot reach, and no
# .wslconfig setting or port forwarding changes that for Ray; mirrored networking shares Windows'
# LAN address. Inbound TCP passes two firewalls: Hyper-V's (for WSL's VM creator) and Defender's.
MIRRORED_MIN_BUILD = 22621                       # Windows 11 22H2: the first with mirrored networking
NO_NAT_ROUTE = ("This course needs Windows 11 22H2 or newer (build 22621+): behind WSL's NAT, Ray "
                "inside WSL tells the Mac an address the Mac cannot reach, and port forwarding does not "
                "change that. Update Windows (Settings > Windows Update; winver shows the build), or "
                "run Ubuntu on the desktop itself")
NATIVE = ("native Windows: the desktop runs the course inside WSL2 (Ubuntu), because Ray's "
          "multi-node clusters do not support Windows, PyPI's torch for Windows is a CPU build, "
          "and the course's steps need bash and make")
RULE = "hetlab Ray"                # display name of the firewall rules for Ray's pinned ports
TRAIN_RULE = "hetlab Ray Train"    # ... and for Ray Train's rendezvous store (notebook 07)
POWER_SETTINGS = ("standby-timeout-ac", "hibernate-timeout-ac")   # powercfg /change: sleep, hibernate on AC


# --- what WSL and Windows say, from inside WSL ---

def is_wsl(kernel_release: str, env: dict, interop: bool = False) -> bool:
    """Linux under WSL: a kernel release with "microsoft" or "WSL" (e.g.
    ``5.15.153.1-microsoft-standard-WSL2``), WSL's variables, or its interop binfmt entry."""
    release = kernel_release.lower()
    return ("microsoft" in release or "wsl" in release or "WSL_DISTRO_NAME" in env
            or "WSL_INTEROP" in env or interop)


def networking_mode(wslinfo: str | None) -> str:
    """``mirrored`` or ``nat`` (or another mode ``wslinfo --networking-mode`` names, e.g. ``virtioproxy``);
    ``unknown`` without ``wslinfo``, which WSL before 2.0 lacks (and which has no mirrored mode)."""
    return wslinfo.strip().splitlines()[0].strip().lower() if wslinfo and wslinfo.strip() else "unknown"


def in_wsl() -> bool:
    """Is this process inside WSL (this machine's signs)?"""
    return is_wsl(platform.release(), os.environ, INTEROP.exists())


def windows_build(ver: str | None) -> int | None:
    """Windows' build number from ``cmd.exe /c ver`` ("Microsoft Windows [Version 10.0.22631.4460]"
    gives 22631; the words vary with the language, the numbers do not), or None."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", ver or "")
    return int(match.group(3)) if match else None


def build_problem(build: int | None) -> str | None:
    """One line when this Windows is too old for mirrored networking, else None (unknown: None)."""
    if build is None or build >= MIRRORED_MIN_BUILD:
        return None
    return (f"Windows build {build}: mirrored networking needs Windows 11 22H2 or newer; no .wslconfig "
            f"change helps. {NO_NAT_ROUTE}")


def output(argv: list[str], timeout: float = 20, any_status: bool = False) -> str | None:
    """A program's output (a Windows program's too, run from inside WSL through its interop), or None
    where it cannot run or (unless ``any_status``: ``systemctl is-enabled`` exits 1 when masked) fails."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.replace("\x00", "") if out.returncode == 0 or any_status else None


def wslconfig_path() -> Path | None:
    """``%UserProfile%\\.wslconfig`` as a path inside WSL (``/mnt/c/Users/NAME/.wslconfig``), found
    through interop; or None outside WSL."""
    profile = output(["cmd.exe", "/c", "echo %USERPROFILE%"])
    path = output(["wslpath", "-u", profile.strip()]) if profile and profile.strip() else None
    return Path(path.strip()) / ".wslconfig" if path and path.strip() else None


# --- .wslconfig (``hetlab wslconfig``): the course's three settings (Microsoft's "Advanced settings
# configuration in WSL", learn.microsoft.com/windows/wsl/wsl-config) ---
WSLCONFIG = {"wsl2": {"networkingMode": "mirrored", "vmIdleTimeout": "-1"},
             "general": {"instanceIdleTimeout": "-1"}}


def missing(text: str) -> list[str]:
    """The ``section.key=value`` settings of ``WSLCONFIG`` that a ``.wslconfig``'s ``text`` lacks
    (compared without case, as WSL reads them; ``#`` comments dropped; a later line of a key wins)."""
    have, section = {}, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip().lower()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line and section is not None:
            key, value = line.split("=", 1)
            have[f"{section}.{key.strip()}"] = value.strip()
    return [f"{section}.{key}={value}" for section, keys in WSLCONFIG.items() for key, value in keys.items()
            if have.get(f"{section}.{key.lower()}") != value.lower()]


def lines() -> list[str]:
    """``WSLCONFIG`` as the lines of a ``.wslconfig`` file."""
    out = []
    for section, keys in WSLCONFIG.items():
        out += [f"[{section}]"] + [f"{key}={value}" for key, value in keys.items()]
    return out


def wslconfig_text(path: Path, lacking: list[str]) -> str:
    """``hetlab wslconfig``: the course's settings ``path`` lacks, as notes, and the one line that opens
    it in Notepad. You edit it yourself, so every other line of yours stays as you wrote it."""
    return commands.block([f"{path} lacks {', '.join(lacking)}. In Notepad, put these lines under their "
                           "[section] header (add the header where the file has none; replace a line of the "
                           "same key), save, then `wsl --shutdown` in PowerShell:", *(f"   {row}" for row in lines())],
                          "this Ubuntu window", [f"notepad.exe \"$(wslpath -w '{path}')\""])


# --- the printed steps: ``hetlab head`` inside WSL, and the teardown ---

def firewall_rules(name: str, ranges: list[str], remote: str) -> list[str]:
    """The PowerShell that (re)makes the two rules admitting TCP ``ranges`` from ``remote`` only:
    the Hyper-V firewall's (WSL's VM creator) and Windows Defender Firewall's. Each is removed
    first, silently if absent, so pasting twice leaves one rule of each."""
    ports, address = ",".join(f"'{r}'" for r in ranges), f"'{remote}'"   # quoted, comma-separated: one String[]
    return [f"Remove-NetFirewallHyperVRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
            f"New-NetFirewallHyperVRule -DisplayName '{name}' -Direction Inbound -VMCreatorId "
            f"'{WSL_VM_CREATOR}' -Protocol TCP -LocalPorts {ports} -RemoteAddresses {address} -Action Allow",
            f"Remove-NetFirewallRule -DisplayName '{name}' -ErrorAction SilentlyContinue",
            f"New-NetFirewallRule -DisplayName '{name}' -Direction Inbound -Protocol TCP "
            f"-LocalPort {ports} -RemoteAddress {address} -Action Allow"]


def powershell_steps(remote_ip: str | None, ports: commands.Ports = commands.Ports(),
                     only_firewall: bool = False) -> str:
    """Part B, for PowerShell as Administrator: both firewalls for exactly the head's ports (Ray Train's
    among them) from the Mac only; no sleep on AC power; WSL updated and restarted last, as it closes
    every Ubuntu window. ``only_firewall``: the rules alone (notebook 04 runs inside WSL's JupyterLab)."""
    remote = "MAC_IP" if remote_ip is None else commands.check_ip(remote_ip, "the Mac's IP")
    ranges, train = commands.firewall_ranges(ports, head=True), commands.train_ranges(ports, "desktop")
    notes = ["B) On Windows, in PowerShell as Administrator (Start, type PowerShell, Run as administrator).",
             *(["   Replace MAC_IP in the block with the Mac's LAN address (macOS: ipconfig getifaddr en0)."]
               if remote_ip is None else []),
             f"1) firewalls: TCP {' '.join(ranges)} from the Mac only, in the Hyper-V firewall (inbound to WSL) "
             f"and Windows Defender Firewall (pasting again replaces them); the rules named '{TRAIN_RULE}' "
             f"open TCP {' '.join(train)}, Ray Train's rendezvous store (notebook 07)."]
    lines = [*firewall_rules(RULE, ranges, remote), *firewall_rules(TRAIN_RULE, train, remote)]
    if not only_firewall:
        notes += ["2) no sleep or hibernation on the charger during a run.",
                  "3) WSL up to date (mirrored networking needs WSL 2.0 or newer), then restarted so that it reads "
                  ".wslconfig. This closes every Ubuntu window: open Ubuntu again, run `hetlab doctor`, then "
                  "`hetlab head ...` again for part C."]
        lines += [*[f"powercfg /change {name} 0" for name in POWER_SETTINGS], "wsl --update", "wsl --shutdown"]
    return commands.block(notes, "PowerShell as Administrator, on Windows", lines)


WSL_FIREWALL = (["2) firewall: the PowerShell rules of part B (WSL needs no ufw); --node-ip-address is "
                 "Windows' LAN address, which mirrored mode shares with WSL."], [])
IN_UBUNTU = dict(firewall=WSL_FIREWALL, paste_into="the Ubuntu (WSL) terminal")


def _part_a(build: int | None) -> str:
    """Part A, or below build 22621 a one-line HetlabError, since no setting makes the Mac reach WSL there."""
    if problem := build_problem(build):
        raise HetlabError(problem)
    checked = f"this Windows is build {build}: fine" if build is not None else "`winver` on Windows shows the version"
    return commands.block([f"A) Windows 11 22H2 or newer (build 22621+) is needed: {checked}.",
                           "   In this Ubuntu window first: WSL's settings ("
                           + ", ".join(line for line in lines() if not line.startswith("["))
                           + ") go into %UserProfile%\\.wslconfig: this line says which it lacks."],
                          "this Ubuntu window", ["hetlab wslconfig"])


def render_head(ip: str, mac_ip: str | None = None, ports: commands.Ports = commands.Ports(),
                build: int | None = None) -> str:
    """``hetlab head`` inside WSL: parts A, B and C, a blank line apart; part C is the head's steps
    inside WSL, as on a Linux desktop with Windows' LAN address, the token shown to be typed on the
    Mac (no SSH route into WSL)."""
    return "\n\n".join([_part_a(build), powershell_steps(mac_ip, ports), commands.render_head(
        ip, ports, where="C) Inside WSL (Ubuntu) on the Windows desktop, the head", mac_ip=mac_ip,
        token="by hand", **IN_UBUNTU)])


def notebook_head(ip: str, mac_ip: str | None, ports: commands.Ports = commands.Ports()) -> str:
    """Notebook 04's desktop lines on a Windows desktop: part B's firewall rules alone (not its
    ``wsl --shutdown``, which would close the Ubuntu that runs JupyterLab), then the head's block."""
    return "\n\n".join([powershell_steps(mac_ip, ports, only_firewall=True), commands.render_head(
        ip, ports, where="Then inside WSL (Ubuntu), the head", mac_ip=mac_ip, token="by hand", **IN_UBUNTU)])
