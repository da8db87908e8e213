"""A Windows 11 desktop as the head: the course runs inside WSL2 (README, "Windows desktop"; notebook 04).

Natively on Windows, Ray's multi-node clusters are unsupported, PyPI's torch is a CPU build
and there is no bash or make; inside WSL2 Ubuntu the desktop is a Linux head like any other,
with three Windows-side steps (Microsoft's docs: learn.microsoft.com/windows/wsl/networking
and .../wsl-config; the Hyper-V firewall page; the NetSecurity cmdlets):

* mirrored networking (``networkingMode=mirrored`` under ``[wsl2]`` in ``%UserProfile%\\.wslconfig``,
  Windows 11 22H2+): WSL shares Windows' LAN address, so the Mac reaches Ray inside WSL; the
  default, NAT, hides WSL behind a 172.16/12 address the Mac cannot reach;
* inbound TCP passes two firewalls: the Hyper-V firewall (a rule for WSL's VM creator id) and
  Windows Defender Firewall; each rule admits exactly the head's ports, from the Mac only;
* a long run needs Windows awake and WSL kept from idling out when its last window closes.

Detection takes the signs as arguments (kernel release, environment, addresses), so the tests
supply WSL's own; the PowerShell steps are plain text built from ``hetlab.commands.Ports``.
"""
from __future__ import annotations

import ipaddress
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from hetlab import commands
from hetlab.errors import HetlabError

WSL_VM_CREATOR = "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"  # Get-NetFirewallHyperVVMCreator: "WSL"
RULE = "hetlab Ray"                # display name of the firewall rules for Ray's pinned ports
TRAIN_RULE = "hetlab Ray Train"    # ... and for Ray Train's rendezvous and gloo (notebook 07)
WSLCONFIG = {"wsl2": {"networkingMode": "mirrored", "vmIdleTimeout": "-1"},
             "general": {"instanceIdleTimeout": "-1"}}
NAT_NET = ipaddress.ip_network("172.16.0.0/12")  # where WSL's NAT puts the VM
HYPERV_MAC = "00:15:5d"                          # the MAC prefix of Hyper-V's virtual adapters
INTEROP = Path("/proc/sys/fs/binfmt_misc/WSLInterop")
NATIVE = ("native Windows: the desktop runs the course inside WSL2 (Ubuntu), because Ray's "
          "multi-node clusters do not support Windows, PyPI's torch for Windows is a CPU build, "
          "and the course's steps need bash and make")


def is_wsl(kernel_release: str, env: dict, interop: bool = False) -> bool:
    """Linux under WSL: a kernel release with "microsoft" or "WSL" (e.g.
    ``5.15.153.1-microsoft-standard-WSL2``), WSL's variables, or its interop binfmt entry."""
    release = kernel_release.lower()
    return ("microsoft" in release or "wsl" in release or "WSL_DISTRO_NAME" in env
            or "WSL_INTEROP" in env or interop)


def wsl_version(kernel_release: str) -> int:
    """2 for WSL2's kernel (``...-microsoft-standard-WSL2``), 1 for WSL1's (``4.4.0-19041-Microsoft``)."""
    release = kernel_release.lower()
    return 2 if "wsl2" in release or "microsoft-standard" in release else 1


def networking_mode(wslinfo: str | None, route_ip: str | None, route_mac: str | None = None) -> str:
    """``mirrored`` or ``nat`` (or what ``wslinfo --networking-mode`` says, e.g. ``virtioproxy``).

    Without ``wslinfo`` (older WSL), the address on the default route decides: NAT gives the
    VM a 172.16/12 address on a Hyper-V adapter (MAC 00:15:5d:...); mirrored mode shows
    Windows' own LAN address and adapter.
    """
    if wslinfo and wslinfo.strip():
        return wslinfo.strip().splitlines()[0].strip().lower()
    if route_ip is None:
        return "unknown"
    nat_address = ipaddress.ip_address(route_ip) in NAT_NET
    hyperv = route_mac is None or route_mac.lower().startswith(HYPERV_MAC)
    return "nat" if nat_address and hyperv else "mirrored"


def default_route_interface(proc_net_route: str) -> str | None:
    """The interface of the IPv4 default route, from the text of ``/proc/net/route``."""
    for line in proc_net_route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return None


def parse_wslconfig(text: str) -> dict[str, dict[str, str]]:
    """``.wslconfig`` as {section: {key: value}}; keys as written, ``#`` comments dropped."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip().lower(), {})
        elif "=" in line and current is not None:
            key, value = line.split("=", 1)
            current[key.strip()] = value.strip()
    return sections


def wslconfig_missing(config: dict[str, dict[str, str]]) -> list[str]:
    """The ``section.key=value`` lines of ``WSLCONFIG`` that ``config`` lacks (keys compared
    without case, as WSL reads them)."""
    missing = []
    for section, wanted in WSLCONFIG.items():
        have = {k.lower(): v.lower() for k, v in config.get(section, {}).items()}
        missing += [f"{section}.{key}={value}" for key, value in wanted.items()
                    if have.get(key.lower()) != value.lower()]
    return missing


def wslconfig_lines() -> list[str]:
    """``WSLCONFIG`` as the lines of a ``.wslconfig`` file."""
    lines = []
    for section, keys in WSLCONFIG.items():
        lines += [f"[{section}]"] + [f"{key}={value}" for key, value in keys.items()]
    return lines


def in_wsl() -> bool:
    """Is this process inside WSL (this machine's signs)?"""
    return is_wsl(platform.release(), os.environ, INTEROP.exists())


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """This Linux's ephemeral ports (where gloo listens), or Linux's default where unreadable."""
    try:
        low, high = (int(v) for v in Path(path).read_text().split())
    except (OSError, ValueError):
        return commands.EPHEMERAL_PORTS["linux"]
    return low, high


def local_signs() -> dict:
    """This machine's signs for the functions above (read, nothing sent)."""
    signs = {"platform": sys.platform, "release": platform.release(), "env": dict(os.environ),
             "interop": INTEROP.exists(), "dxg": Path("/dev/dxg").exists()}
    if not is_wsl(signs["release"], signs["env"], signs["interop"]):
        return signs
    signs["wslinfo"] = _run(["wslinfo", "--networking-mode"])
    signs["route_ip"], signs["route_mac"] = _route_address()
    smi = shutil.which("nvidia-smi")
    signs["linux_nvidia_smi"] = smi is not None and not smi.startswith("/usr/lib/wsl/")
    signs["wslconfig"] = _read_wslconfig()
    return signs


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.replace("\x00", "") if out.returncode == 0 else None


def _route_address() -> tuple[str | None, str | None]:
    import psutil
    try:
        name = default_route_interface(Path("/proc/net/route").read_text())
    except OSError:
        return None, None
    addrs = psutil.net_if_addrs().get(name or "", [])
    ip = next((a.address for a in addrs if a.family == socket.AF_INET), None)
    mac = next((a.address for a in addrs if a.family == psutil.AF_LINK), None)
    return ip, mac


def _read_wslconfig() -> str | None:
    """Windows' ``%UserProfile%\\.wslconfig`` read from inside WSL (through interop), or None."""
    profile = _run(["cmd.exe", "/c", "echo %USERPROFILE%"])
    path = _run(["wslpath", "-u", profile.strip()]) if profile and profile.strip() else None
    try:
        return (Path(path.strip()) / ".wslconfig").read_text(errors="replace") if path else None
    except OSError:
        return None


def head_flavour(platform_name: str, wsl: bool, asked: bool) -> str:
    """What ``hetlab head`` prints: ``"windows"`` (WSL, or ``--windows``) or ``"linux"``;
    native Windows without ``--windows`` is refused in one line."""
    if asked or wsl:
        return "windows"
    if platform_name == "win32":
        raise HetlabError(f"hetlab head on {NATIVE}: run it inside WSL, or `hetlab head --windows "
                          f"--ip WINDOWS_LAN_IP --mac-ip MAC_IP` prints the Windows steps.")
    return "linux"


def _ps_list(values: list[str]) -> str:
    return ",".join(f"'{v}'" for v in values)


def firewall_rules(name: str, ranges: list[str], mac: str) -> list[str]:
    """The two PowerShell rules that admit TCP ``ranges`` from ``mac`` only: the Hyper-V
    firewall's (WSL's VM creator) and Windows Defender Firewall's."""
    ports, remote = _ps_list(ranges), _ps_list([mac])  # quoted: PowerShell reads them as text
    return [f"New-NetFirewallHyperVRule -DisplayName '{name}' -Direction Inbound -VMCreatorId "
            f"'{WSL_VM_CREATOR}' -Protocol TCP -LocalPorts {ports} -RemoteAddresses {remote} -Action Allow",
            f"New-NetFirewallRule -DisplayName '{name}' -Direction Inbound -Protocol TCP "
            f"-LocalPort {ports} -RemoteAddress {remote} -Action Allow"]


def powershell_steps(mac_ip: str | None, ports: commands.Ports = commands.Ports(),
                     ephemeral: tuple[int, int] = commands.EPHEMERAL_PORTS["linux"]) -> list[str]:
    """The Windows side, run once in PowerShell as Administrator: .wslconfig, WSL restart,
    both firewalls for exactly the head's ports from the Mac only, no sleep on AC power.

    ``ephemeral`` is WSL's Linux ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``
    there), where gloo listens for Ray Train (notebook 07).
    """
    mac = "MAC_IP" if mac_ip is None else commands.check_ip(mac_ip, "the Mac's IP")
    train = [str(ports.train_rendezvous), f"{ephemeral[0]}-{ephemeral[1]}"]
    return [
        "# On Windows, in PowerShell as Administrator (Start, type PowerShell, Run as administrator).",
        "# 1) WSL settings: mirrored networking (Windows 11 22H2 or newer; WSL then shares Windows' LAN",
        "#    address), and no idle shutdown of WSL when its last window closes. No .wslconfig yet",
        "#    (Test-Path \"$env:USERPROFILE\\.wslconfig\" says False)? Write it:",
        f"Set-Content -Path \"$env:USERPROFILE\\.wslconfig\" -Encoding ascii -Value {_ps_list(wslconfig_lines())}",
        "#    Have one already? notepad \"$env:USERPROFILE\\.wslconfig\", and put these lines in its "
        "[wsl2] and [general] sections.",
        "# 2) bring WSL up to date (mirrored mode needs WSL 2.0 or newer), then restart it so that it reads",
        "#    the settings (this closes every WSL window; no reboot needed):",
        "wsl --update",
        "wsl --shutdown",
        *(["#    replace MAC_IP below with the Mac's LAN address (macOS: ipconfig getifaddr en0)"]
          if mac_ip is None else []),
        f"# 3) firewalls: TCP {' '.join(commands.firewall_ranges(ports, head=True))} from the Mac only, "
        f"in the Hyper-V firewall (inbound to WSL) and Windows Defender Firewall:",
        *firewall_rules(RULE, commands.firewall_ranges(ports, head=True), mac),
        f"#    Ray Train (notebook 07) only: also TCP {' '.join(train)} (its rendezvous, and gloo on "
        f"WSL's ephemeral ports); remove the leading # to run these two:",
        *[f"#    {line}" for line in firewall_rules(TRAIN_RULE, train, mac)],
        f"#    keep {', '.join(str(p) for p in ports.local_only(head=True))} closed (dashboard and "
        f"metrics: local use only)",
        "# 4) no sleep or hibernation on the charger during a run (undo: docs/troubleshooting.md):",
        "powercfg /change standby-timeout-ac 0",
        "powercfg /change hibernate-timeout-ac 0",
    ]


def render_head(ip: str, mac_ip: str | None = None, ports: commands.Ports = commands.Ports(),
                ephemeral: tuple[int, int] = commands.EPHEMERAL_PORTS["linux"], **options) -> str:
    """``hetlab head --windows``: the PowerShell steps, then the head's steps inside WSL
    (token, ``ray start --head`` with Windows' LAN address, as on a Linux desktop)."""
    inside = commands.render_head(
        ip, ports, where="Inside WSL (Ubuntu) on the Windows desktop, the head",
        firewall=["# 2) firewall: the PowerShell rules above (WSL needs no ufw); --node-ip-address is "
                  "Windows' LAN address, which mirrored mode shares with WSL"], **options)
    nat = ([f"# note: {ip} is in 172.16/12, where WSL's NAT puts WSL: if it is WSL's own address, the Mac "
            f"cannot reach it; after step 1, give Windows' LAN address (ipconfig) to --ip"]
           if ipaddress.ip_address(commands.check_ip(ip, "head IP")) in NAT_NET else [])
    return "\n".join([*powershell_steps(mac_ip, ports, ephemeral), "", *nat, inside,
                      "# keep this Ubuntu window open during a run (older WSL ignores instanceIdleTimeout "
                      "and stops the distro a while after its last window closes)"])
