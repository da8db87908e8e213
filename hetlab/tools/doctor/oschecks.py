"""The doctor's checks of this machine's operating system for a long run (``hetlab doctor``, notebook 04).

Native Windows: one line, the course runs inside WSL2. Inside WSL: WSL 2 and the Windows side
(``winchecks``: build, mirrored networking, NVIDIA's Windows driver, idle settings, firewall rules,
sleep; README, "Windows desktop"). A Linux desktop: ufw active, automatic suspend off, NVIDIA's
driver for the card on its bus. A Mac: sleep settings and the power source (``pmset``), the
application firewall and Ray's programs in it (``socketfilterfw``), and torch.distributed. Each parser is a pure function of the command's text, so the tests supply
the output of machines that do not exist here.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from hetlab.cluster import commands
from hetlab.windows import wsl
from hetlab.tools.doctor import winchecks
from hetlab.tools.doctor.checks import FAIL, OK, WARN, Check
from hetlab.vocab import MAC_IP_ENV, Ports

CAFFEINATE = "caffeinate -dims"   # in a second Terminal during a run: no display, idle, disk or system sleep


def native_windows_check(platform_name: str) -> list[Check]:
    """On native Windows, the one line that sends the course into WSL2."""
    if platform_name != "win32":
        return []
    return [Check("Windows", FAIL, wsl.NATIVE,
                  "install WSL2 with Ubuntu (PowerShell as Administrator: wsl --install -d Ubuntu), "
                  "then run hetlab there (README, \"Windows desktop\")")]


def wsl_checks(signs: dict) -> list[Check]:
    """Inside WSL: its version, Windows' build, networking mode, NVIDIA's driver, idle settings, and
    the Windows side (firewall rules, sleep), from ``wsl.local_signs()`` and
    ``winchecks.windows_side_signs()``."""
    release, env = signs["release"], signs["env"]
    if not wsl.is_wsl(release, env, signs.get("interop", False)):
        return []
    if wsl.wsl_version(release) == 1:
        return [Check("WSL", FAIL, f"WSL 1 (kernel {release}): no GPU and no network of its own",
                      f"convert it: wsl --set-version {env.get('WSL_DISTRO_NAME', 'Ubuntu')} 2 "
                      f"(PowerShell), then open Ubuntu again")]
    route_ip = signs.get("route_ip")
    mode = wsl.networking_mode(signs.get("wslinfo"), route_ip, signs.get("route_mac"))
    seen = f"default route on {route_ip}" if route_ip else "no default route"
    return [Check("WSL", OK, f"WSL 2 (kernel {release}), distro {env.get('WSL_DISTRO_NAME', '?')}"),
            winchecks.build_check(signs.get("build")),
            winchecks.networking_check(mode, seen, signs.get("build"), signs.get("wslconfig"),
                                       signs.get("wsl_package")),
            winchecks.gpu_check(signs.get("dxg", False), signs.get("wsl_smi"), signs.get("linux_nvidia_smi", False)),
            winchecks.idle_check(signs.get("wslconfig"), signs.get("build")),
            winchecks.power_check(signs.get("powercfg")),
            *winchecks.rules_checks(signs.get("rules"), Ports(), signs["env"].get(MAC_IP_ENV))]


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


# --- Linux: the firewall, automatic suspend, NVIDIA's driver; the Mac's firewall ---

UFW_ENABLE = ("paste the desktop's lines notebook 04 prints: they keep SSH open, deny the rest, open Ray's ports "
              "to the Mac only, and turn ufw on")


def ufw_check(status: str | None, conf: str | None) -> Check:
    """ufw's state, from ``ufw status`` (needs root) or ``/etc/ufw/ufw.conf`` (``ENABLED=``): inactive
    (Ubuntu's default), the printed ``ufw allow`` lines do nothing and every port is open to the LAN."""
    if status and "Status:" in status:
        active = "Status: active" in status
    elif conf is not None:
        active = re.search(r"^\s*ENABLED\s*=\s*yes", conf, flags=re.M | re.I) is not None
    else:
        return Check("firewall", WARN, "no ufw here: the firewall lines hetlab prints are ufw's",
                     "sudo apt install ufw, then " + UFW_ENABLE + " (or add the same rules to your own firewall)")
    if active:
        return Check("firewall", OK, "ufw is active: only what its rules allow comes in")
    return Check("firewall", WARN, "ufw is inactive: the `ufw allow` rules do nothing, and every port of "
                                   "this machine is open to the LAN", UFW_ENABLE)


def suspend_check(ac_type: str | None, ac_timeout: str | None, suspend_target: str | None) -> Check:
    """Ubuntu's automatic suspend on AC power (GNOME's ``sleep-inactive-ac-type`` and ``-timeout``), unless
    systemd's suspend is masked: a suspended desktop ends the run."""
    kind = (ac_type or "").strip().strip("'")
    seconds = int(m.group(0)) if (m := re.search(r"\d+", ac_timeout or "")) else None
    if (suspend_target or "").strip() == "masked":
        return Check("automatic suspend", OK, "suspend is masked (systemd): this machine never suspends")
    if not kind:
        return Check("automatic suspend", OK, "no GNOME power settings here (gsettings): check your desktop's "
                                              "own power settings for automatic suspend")
    if kind == "nothing" or seconds == 0:
        return Check("automatic suspend", OK, "off on AC power (GNOME)")
    after = f" after {seconds // 60} min idle" if seconds else ""
    return Check("automatic suspend", WARN, f"on AC power this machine goes to {kind}{after} (GNOME): "
                                            f"a suspended desktop ends the run",
                 "Settings > Power > Automatic Suspend: off when plugged in, or gsettings set "
                 "org.gnome.settings-daemon.plugins.power sleep-inactive-ac-type 'nothing'")


def nvidia_pci(devices: dict[str, tuple[str, str]]) -> bool:
    """Is an NVIDIA display controller on the PCI bus? ``devices``: {slot: (vendor, class)} as in
    /sys/bus/pci/devices/*/{vendor,class} (NVIDIA is 0x10de, a display controller 0x03xxxx)."""
    return any(v.strip().lower() == "0x10de" and c.strip().lower().startswith("0x03") for v, c in devices.values())


def linux_driver_check(card_on_bus: bool, smi_works: bool) -> list[Check]:
    """An NVIDIA card on the bus with no working nvidia-smi: no NVIDIA driver, so no CUDA."""
    if not card_on_bus:
        return []
    if smi_works:
        return [Check("NVIDIA driver", OK, "nvidia-smi lists the card")]
    return [Check("NVIDIA driver", FAIL, "an NVIDIA card is on the PCI bus, but nvidia-smi lists none: no "
                                         "NVIDIA driver", "install it: sudo ubuntu-drivers install, then reboot "
                                                          "(nvidia-smi must list the card)")]


def mac_firewall_check(state: str | None) -> list[Check]:
    """The Mac's application firewall (``socketfilterfw --getglobalstate``): off by default, then nothing
    filters what comes in; "block all" stops the desktop's connections to Ray."""
    match = re.search(r"State = (\d)", state or "")
    if not match:
        return []
    value = int(match.group(1))
    allow = "then allow Ray's programs (the socketfilterfw lines `hetlab join` prints)"
    if value == 0:
        return [Check("Mac firewall", WARN, "the application firewall is off: nothing filters incoming "
                                            "connections to this Mac",
                      f"sudo {commands.MACOS_FIREWALL} --setglobalstate on (or System Settings > Network > "
                      f"Firewall), {allow}")]
    if value == 2:
        return [Check("Mac firewall", WARN, "the firewall blocks all incoming connections: the desktop cannot "
                                            "reach Ray on this Mac",
                      f"turn off \"Block all incoming connections\" (System Settings > Network > Firewall > "
                      f"Options), {allow}")]
    return [Check("Mac firewall", OK, "the application firewall is on; `hetlab join` prints the lines that "
                                      "allow Ray's programs")]


def listed_apps(listapps: str) -> dict[str, bool]:
    """``{path: allowed}`` from ``socketfilterfw --listapps``: each ``N : PATH`` line, then its verdict in
    parentheses, ``( Allow incoming connections )`` or ``( Block incoming connections )``."""
    apps, last = {}, None
    for line in listapps.splitlines():
        if match := re.match(r"\s*\d+\s*:\s*(\S.*?)\s*$", line):
            last = match.group(1)
        elif (verdict := re.search(r"\(\s*(Allow|Block)", line)) and last:
            apps[last], last = verdict.group(1) == "Allow", None
    return apps


def mac_apps_check(state: str | None, listapps: str | None, apps: list[str]) -> list[Check]:
    """Ray's programs in the Mac's application firewall (``--listapps``: it tells a program never listed
    from an allowed one): with the firewall on, a blocked python or raylet drops every connection the
    desktop opens to it. Nothing to say with the firewall off (``mac_firewall_check`` says so)."""
    match = re.search(r"State = (\d)", state or "")
    if not match or match.group(1) == "0":
        return []
    name, fix = "Ray in the Mac firewall", "paste the socketfilterfw line `hetlab join` prints, with the conda env active"
    if listapps is None:
        return [Check(name, WARN, f"could not read `{commands.MACOS_FIREWALL} --listapps`",
                      "System Settings > Network > Firewall > Options must list python and raylet as allowed; " + fix)]
    listed = {os.path.realpath(path): allowed for path, allowed in listed_apps(listapps).items()}
    blocked = [app for app in apps if listed.get(os.path.realpath(app)) is False]
    absent = [app for app in apps if os.path.realpath(app) not in listed]
    if blocked:
        return [Check(name, FAIL, f"the firewall blocks {', '.join(map(os.path.basename, blocked))}: the desktop's "
                                  f"connections to Ray here are dropped",
                      " && ".join(f"sudo {commands.MACOS_FIREWALL} --unblockapp {shlex.quote(a)}" for a in blocked))]
    if absent:
        return [Check(name, WARN, f"{', '.join(map(os.path.basename, absent))} not in the firewall's list: macOS "
                                  f"may drop the desktop's connections to them", fix)]
    return [Check(name, OK, "python, raylet and gcs_server are allowed incoming connections")]


def macos_apps() -> list[str]:
    """The programs that take the desktop's connections on a Mac, as the printed firewall line finds them
    (``commands.MACOS_APPS``): this Python, Ray's raylet and gcs_server (found without importing Ray)."""
    here = [os.path.realpath(sys.executable)]
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.origin:
        return here
    ray_bin = os.path.join(os.path.dirname(spec.origin), "core", "src", "ray")
    return here + [os.path.join(ray_bin, "raylet", "raylet"), os.path.join(ray_bin, "gcs", "gcs_server")]


def distributed_check(available: bool) -> Check:
    """``torch.distributed`` in this torch: notebook 07's ranks build their process group with it (a
    torch built without it has no ``init_process_group``)."""
    if available:
        return Check("torch.distributed", OK, "available (notebook 07's Ray Train ranks use it)")
    return Check("torch.distributed", WARN, "this torch was built without torch.distributed: notebook 07 (Ray "
                                            "Train) cannot run its rank here; notebooks 05, 06, 08 can",
                 "install the course's torch: conda env create -f environment-mac.yml (or update the env from it)")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _out(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 or argv[0] == "systemctl" else None


def linux_checks(smi_works: bool) -> list[Check]:
    """A Linux desktop (not WSL): its firewall, automatic suspend, and NVIDIA's driver."""
    schema = "org.gnome.settings-daemon.plugins.power"
    pci = {d.name: (_read(str(d / "vendor")) or "", _read(str(d / "class")) or "")
           for d in Path("/sys/bus/pci/devices").glob("*")}
    return [ufw_check(_out(["ufw", "status"]), _read("/etc/ufw/ufw.conf")),
            suspend_check(_out(["gsettings", "get", schema, "sleep-inactive-ac-type"]),
                          _out(["gsettings", "get", schema, "sleep-inactive-ac-timeout"]),
                          _out(["systemctl", "is-enabled", "suspend.target"])),
            *linux_driver_check(nvidia_pci(pci), smi_works)]


def os_checks(system: str, smi_works: bool = False) -> list[Check]:
    """This machine's checks: native Windows, WSL (with the Windows side), a Linux desktop, or a Mac's
    sleep, power, firewall (Ray's programs in it too) and torch.distributed (``hetlab doctor``).
    ``system``: ``platform.system()``; ``smi_works``: nvidia-smi lists a card here."""
    if system == "Darwin":
        import torch
        state = _out([commands.MACOS_FIREWALL, "--getglobalstate"])
        return (mac_power_checks(_out(["pmset", "-g"]), _out(["pmset", "-g", "batt"])) + mac_firewall_check(state)
                + mac_apps_check(state, _out([commands.MACOS_FIREWALL, "--listapps"]), macos_apps())
                + [distributed_check(torch.distributed.is_available())])
    signs = wsl.local_signs()
    if wsl.is_wsl(signs["release"], signs["env"], signs["interop"]):
        return wsl_checks({**signs, **winchecks.windows_side_signs()})
    if system == "Linux":
        return linux_checks(smi_works)
    return native_windows_check(signs["platform"])
