"""A Windows 11 desktop in the course: what WSL2 and Windows look like from inside WSL (README,
"Windows desktop"; notebook 04).

Natively on Windows Ray has no multi-node clusters and PyPI's torch is a CPU build (``NATIVE``); in
WSL2 Ubuntu the desktop is a Linux node if Windows has mirrored networking (``MIRRORED_MIN_BUILD``),
two firewalls let it in, and it stays awake. Detection takes the signs as arguments, so tests supply WSL's.

Windows' ``%UserProfile%\\.wslconfig`` is read and edited here too (``hetlab wslconfig``): ``edit`` adds
or replaces only the course's keys (``WSLCONFIG``) and keeps every other line, so a second run changes
nothing; ``write`` keeps the file from before hetlab's first edit in ``.wslconfig.hetlab-backup``, which
``undo`` puts back.
"""
from __future__ import annotations

import ipaddress
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from hetlab.errors import HetlabError


WSL_VM_CREATOR = "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"  # Get-NetFirewallHyperVVMCreator: "WSL"
NAT_NET = ipaddress.ip_network("172.16.0.0/12")  # where WSL's NAT puts the VM
HYPERV_MAC = "00:15:5d"                          # the MAC prefix of Hyper-V's virtual adapters
INTEROP = Path("/proc/sys/fs/binfmt_misc/WSLInterop")
WSL_SMI = "/usr/lib/wsl/lib/nvidia-smi"          # NVIDIA's Windows driver puts its nvidia-smi here
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


def package_version(wsl_version_output: str | None) -> tuple[int, ...] | None:
    """WSL's own version from ``wsl.exe --version`` (first line, e.g. "WSL version: 2.3.26.0"),
    or None where that command does not exist (WSL from before 1.0, Windows' inbox WSL)."""
    first = (wsl_version_output or "").strip().splitlines()[:1]
    match = re.search(r"(\d+(?:\.\d+)+)", first[0]) if first else None
    return tuple(int(v) for v in match.group(1).split(".")) if match else None


def local_signs() -> dict:
    """This machine's signs for the functions above (read, nothing sent); inside WSL also what
    Windows says through WSL's interop (build, WSL's version, .wslconfig, NVIDIA's driver)."""
    signs = {"platform": sys.platform, "release": platform.release(), "env": dict(os.environ),
             "interop": INTEROP.exists(), "dxg": Path("/dev/dxg").exists()}
    if not is_wsl(signs["release"], signs["env"], signs["interop"]):
        return signs
    signs["wslinfo"] = output(["wslinfo", "--networking-mode"])
    signs["route_ip"], signs["route_mac"] = _route_address()
    smi = shutil.which("nvidia-smi")
    signs["linux_nvidia_smi"] = smi is not None and not smi.startswith("/usr/lib/wsl/")
    signs["wsl_smi"] = output([WSL_SMI, "-L"]) if Path(WSL_SMI).exists() else None
    signs["build"] = windows_build(output(["cmd.exe", "/c", "ver"]))
    signs["wsl_package"] = package_version(output(["wsl.exe", "--version"]))
    path = wslconfig_path()
    try:
        signs["wslconfig"] = path.read_text(errors="replace") if path else None
    except OSError:
        signs["wslconfig"] = None
    return signs


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


def wslconfig_path() -> Path | None:
    """``%UserProfile%\\.wslconfig`` as a path inside WSL (``/mnt/c/Users/NAME/.wslconfig``), found
    through interop; or None outside WSL."""
    profile = output(["cmd.exe", "/c", "echo %USERPROFILE%"])
    path = output(["wslpath", "-u", profile.strip()]) if profile and profile.strip() else None
    return Path(path.strip()) / ".wslconfig" if path and path.strip() else None


# --- .wslconfig (``hetlab wslconfig``) ---------------------------------------------------------------
# The course's three settings (Microsoft's "Advanced settings configuration in WSL",
# learn.microsoft.com/windows/wsl/wsl-config).
WSLCONFIG = {"wsl2": {"networkingMode": "mirrored", "vmIdleTimeout": "-1"},
             "general": {"instanceIdleTimeout": "-1"}}
BACKUP_SUFFIX = ".hetlab-backup"   # beside the file: .wslconfig.hetlab-backup
_HEADER = re.compile(r"^\s*\[([^\]]+)\]\s*(?:#.*)?$")
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.]+)(\s*=\s*)([^#\r\n]*?)(\s*(?:#.*)?)$")


def parse(text: str) -> dict[str, dict[str, str]]:
    """``.wslconfig`` as {section: {key: value}}; sections in lower case, keys as written, ``#`` comments dropped."""
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


def missing(config: dict[str, dict[str, str]]) -> list[str]:
    """The ``section.key=value`` settings of ``WSLCONFIG`` that ``config`` lacks (keys and values
    compared without case, as WSL reads them)."""
    found = []
    for section, wanted in WSLCONFIG.items():
        have = {k.lower(): v.lower() for k, v in config.get(section, {}).items()}
        found += [f"{section}.{key}={value}" for key, value in wanted.items()
                  if have.get(key.lower()) != value.lower()]
    return found


def lines() -> list[str]:
    """``WSLCONFIG`` as the lines of a ``.wslconfig`` file."""
    out = []
    for section, keys in WSLCONFIG.items():
        out += [f"[{section}]"] + [f"{key}={value}" for key, value in keys.items()]
    return out


def edit(text: str) -> str:
    """``text`` with hetlab's keys added or replaced in their sections; every other line kept.

    A key already set right is left untouched, so ``edit(edit(t)) == edit(t)``. A missing
    section is added at the end; the file's line ending (CRLF from Notepad, or LF) is kept.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    rows = text.splitlines()
    for section, wanted in WSLCONFIG.items():
        start = next((i for i, row in enumerate(rows) if (m := _HEADER.match(row))
                      and m.group(1).strip().lower() == section), None)
        if start is None:
            if rows and rows[-1].strip():
                rows.append("")
            rows += [f"[{section}]"] + [f"{key}={value}" for key, value in wanted.items()]
            continue
        end = next((i for i in range(start + 1, len(rows)) if _HEADER.match(rows[i])), len(rows))
        last = start
        for key, value in wanted.items():
            found = False
            for i in range(start + 1, end):
                m = _KEY.match(rows[i])
                if m and m.group(2).lower() == key.lower():
                    found = True
                    if m.group(4).strip().lower() != value.lower():
                        rows[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{value}{m.group(5)}"
            if not found:
                last = max((i for i in range(start, end) if rows[i].strip()), default=start)
                rows.insert(last + 1, f"{key}={value}")
                end += 1
    return newline.join(rows) + newline


def _decode(data: bytes) -> tuple[str, str]:
    for bom, encoding in ((b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"), (b"\xef\xbb\xbf", "utf-8-sig")):
        if data.startswith(bom):
            return data.decode(encoding), encoding
    return data.decode("utf-8", errors="replace"), "utf-8"


def write(path: Path) -> list[str]:
    """Edit the file at ``path`` in place (made if missing); returns the settings it changed
    (``[]``: nothing to do, the file untouched). The first edit keeps the file as it was in
    ``<path>.hetlab-backup`` (empty when there was no file); a later edit keeps that backup."""
    path = Path(path)
    old, encoding = _decode(path.read_bytes()) if path.exists() else ("", "utf-8")
    changed = missing(parse(old))
    if not changed:
        return []
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    try:
        if not backup.exists():
            backup.write_bytes(path.read_bytes() if path.exists() else b"")
        path.write_bytes(edit(old).encode(encoding))
    except OSError as exc:
        raise HetlabError(f"could not write {path} ({exc.strerror}): edit it by hand in Notepad, "
                          f"adding {' and '.join(lines())}.") from None
    return changed


def undo(path: Path) -> str:
    """Put back the ``.wslconfig`` hetlab first found (its backup), or delete the file where hetlab made
    it; a change you made since goes with it. Returns what was done, in one line."""
    path = Path(path)
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not backup.exists():
        return f"no {backup.name} here: hetlab never edited {path.name}; nothing to undo"
    before = backup.read_bytes()
    if before:
        path.write_bytes(before)
        done = f"{path.name} put back as hetlab found it"
    else:
        path.unlink(missing_ok=True)
        done = f"{path.name} removed (there was none before hetlab made it)"
    backup.unlink()
    return done
