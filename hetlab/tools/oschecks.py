"""The doctor's checks of this machine's operating system for a long run (``hetlab doctor``, notebook 04).

Native Windows: one line, the course runs inside WSL2. Inside WSL: WSL 2, mirrored networking,
the GPU through NVIDIA's Windows driver, and settings that keep WSL from idling out (README,
"Windows desktop"). On a Mac: sleep settings and the power source, from ``pmset``; a sleeping
Mac drops out of the cluster mid-run. Each parser is a pure function of the command's text,
so the tests supply the output of machines that do not exist here.
"""
from __future__ import annotations

import re
import subprocess

from hetlab import windows
from hetlab.tools.preflight import FAIL, OK, WARN, Check

CAFFEINATE = "caffeinate -dims"   # in a second Terminal during a run: no display, idle, disk or system sleep
WSL_RESTART = "then `wsl --shutdown` in PowerShell (no reboot needed) and open Ubuntu again"


def native_windows_check(platform_name: str) -> list[Check]:
    """On native Windows, the one line that sends the course into WSL2."""
    if platform_name != "win32":
        return []
    return [Check("Windows", FAIL, windows.NATIVE,
                  "install WSL2 with Ubuntu (PowerShell as Administrator: wsl --install -d Ubuntu), "
                  "then run hetlab there (README, \"Windows desktop\")")]


def wsl_checks(signs: dict) -> list[Check]:
    """Inside WSL: its version, networking mode, GPU and idle settings, from ``windows.local_signs()``."""
    release, env = signs["release"], signs["env"]
    if not windows.is_wsl(release, env, signs.get("interop", False)):
        return []
    if windows.wsl_version(release) == 1:
        return [Check("WSL", FAIL, f"WSL 1 (kernel {release}): no GPU and no network of its own",
                      f"convert it: wsl --set-version {env.get('WSL_DISTRO_NAME', 'Ubuntu')} 2 "
                      f"(PowerShell), then open Ubuntu again")]
    return [Check("WSL", OK, f"WSL 2 (kernel {release}), distro {env.get('WSL_DISTRO_NAME', '?')}"),
            networking_check(signs.get("wslinfo"), signs.get("route_ip"), signs.get("route_mac")),
            wsl_gpu_check(signs.get("dxg", False), signs.get("linux_nvidia_smi", False)),
            wsl_idle_check(signs.get("wslconfig"))]


def networking_check(wslinfo: str | None, route_ip: str | None, route_mac: str | None) -> Check:
    """Mirrored networking, or the fix: the Mac cannot reach Ray behind WSL's NAT."""
    mode = windows.networking_mode(wslinfo, route_ip, route_mac)
    seen = f"default route on {route_ip}" if route_ip else "no default route"
    if mode == "mirrored":
        return Check("WSL networking", OK, f"mirrored ({seen}): WSL shares Windows' LAN address; "
                                           f"give it to `hetlab head --ip`")
    return Check("WSL networking", FAIL, f"{mode} ({seen}): the Mac cannot reach Ray inside WSL",
                 "put networkingMode=mirrored under [wsl2] in %UserProfile%\\.wslconfig (Windows 11 "
                 f"22H2 or newer; Windows 10 falls back to NAT), {WSL_RESTART}; `hetlab head "
                 "--windows` prints the steps")


def wsl_gpu_check(dxg: bool, linux_nvidia_smi: bool) -> Check:
    """WSL's GPU comes from NVIDIA's Windows driver through /dev/dxg; a Linux driver in WSL breaks it."""
    if not dxg:
        return Check("WSL GPU", WARN, "no /dev/dxg: WSL gives Linux no GPU here",
                     "install NVIDIA's Windows driver (on Windows, not in WSL), run `wsl --update` in "
                     "PowerShell, then `wsl --shutdown` and open Ubuntu again")
    if linux_nvidia_smi:
        return Check("WSL GPU", WARN, "nvidia-smi here is not WSL's (/usr/lib/wsl/lib): a Linux NVIDIA "
                                     "driver or its tools were installed inside WSL",
                     "remove the Linux NVIDIA driver packages from WSL: the Windows driver provides "
                     "CUDA to WSL (NVIDIA's CUDA on WSL guide)")
    return Check("WSL GPU", OK, "/dev/dxg present: the GPU comes from NVIDIA's Windows driver")


def wsl_idle_check(wslconfig: str | None) -> Check:
    """WSL stops a distro a while after its last window closes, and the VM after that."""
    lines = " and ".join(windows.wslconfig_lines())
    if wslconfig is None:
        return Check("WSL idle shutdown", WARN, "could not read %UserProfile%\\.wslconfig from here",
                     f"make sure it holds {lines}, {WSL_RESTART}; or keep an Ubuntu window open during a run")
    missing = [line for line in windows.wslconfig_missing(windows.parse_wslconfig(wslconfig))
               if "IdleTimeout" in line]  # networkingMode is the networking check's
    if missing:
        return Check("WSL idle shutdown", WARN, f".wslconfig lacks {', '.join(missing)}: WSL may stop "
                                                "mid-run once its windows close",
                     f"add them to %UserProfile%\\.wslconfig, {WSL_RESTART}; or keep an Ubuntu window "
                     "open during a run")
    return Check("WSL idle shutdown", OK, ".wslconfig: no idle shutdown (vmIdleTimeout, instanceIdleTimeout -1)")


# --- macOS: sleep and power (pmset) ---

def pmset_sleep(pmset_g: str) -> int | None:
    """Minutes of idle before system sleep (``sleep`` in ``pmset -g``; 0 = never), or None."""
    match = re.search(r"^\s*sleep\s+(\d+)", pmset_g, flags=re.M)
    return int(match.group(1)) if match else None


def pmset_source(pmset_batt: str) -> str | None:
    """``"AC Power"`` or ``"Battery Power"`` from ``pmset -g batt`` ("Now drawing from '...'")."""
    match = re.search(r"drawing from '([^']+)'", pmset_batt)
    return match.group(1) if match else None


def mac_power_checks(pmset_g: str | None, pmset_batt: str | None) -> list[Check]:
    """The Mac's sleep setting and power source, each with its fix; nothing when pmset said nothing."""
    checks = []
    source = pmset_source(pmset_batt or "")
    if source is not None:
        on_ac = source == "AC Power"
        checks.append(Check("Mac power", OK if on_ac else WARN,
                            "on the charger" if on_ac else f"on battery ({source}): a long run drains it, "
                                                           f"and the battery's sleep settings apply",
                            "plug in the charger for a run (caffeinate -s keeps it awake only on AC power)"))
    minutes = pmset_sleep(pmset_g or "")
    if minutes is not None:
        checks.append(Check("Mac sleep", OK if minutes == 0 else WARN,
                            "system sleep off (pmset sleep 0)" if minutes == 0 else
                            f"the Mac sleeps after {minutes} min idle (pmset sleep {minutes}): asleep, "
                            f"it drops out of the cluster",
                            f"during a run: {CAFFEINATE} in a second Terminal (Ctrl-C ends it), lid open; "
                            f"or on the charger for good: sudo pmset -c sleep 0"))
    return checks


def _pmset(*args: str) -> str | None:
    try:
        out = subprocess.run(["pmset", "-g", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def os_checks(system: str) -> list[Check]:
    """This machine's checks: native Windows, WSL, or a Mac's sleep and power (``hetlab doctor``)."""
    if system == "Darwin":
        return mac_power_checks(_pmset(), _pmset("batt"))
    signs = windows.local_signs()
    return native_windows_check(signs["platform"]) + wsl_checks(signs)
