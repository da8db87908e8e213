"""The doctor's findings (``Check``) and its checks of this machine's operating system for a long run
(``hetlab doctor``, notebook 04).

Native Windows: one line, the course runs inside WSL2. Inside WSL: WSL 2 and the Windows side, through
WSL's interop (README, "Windows desktop"): ``cmd.exe /c ver`` (the build: mirrored networking needs
22621+), ``powershell.exe`` (the hetlab firewall rules as Windows holds them), ``powercfg /query
SCHEME_CURRENT SUB_SLEEP`` (sleep and hibernate on AC), NVIDIA's Windows driver's ``nvidia-smi`` in
/usr/lib/wsl/lib, and ``.wslconfig``'s idle settings. A Linux desktop: ufw active, automatic suspend
off, NVIDIA's driver for the card on its bus. A Mac: sleep settings and the power source (``pmset``),
the application firewall and Ray's programs in it (``socketfilterfw``), and torch.distributed. Each
parser is a pure function of the command's text, so the tests supply the output of machines that do
not exist here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from hetlab.cluster import commands
from hetlab.windows import steps, wsl
from hetlab.vocab import MAC_IP_ENV, Ports

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    """One preflight finding; ``fix`` says what to do when ``status`` is not ok."""

    name: str
    status: str    # OK, WARN or FAIL
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def __str__(self) -> str:
        tail = f"  → {self.fix}" if self.fix and self.status != OK else ""
        return f"[{self.status:>4}] {self.name}: {self.detail}{tail}"


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
    ``windows_side_signs()``."""
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
            build_check(signs.get("build")),
            networking_check(mode, seen, signs.get("build"), signs.get("wslconfig"),
                                       signs.get("wsl_package")),
            gpu_check(signs.get("dxg", False), signs.get("wsl_smi"), signs.get("linux_nvidia_smi", False)),
            idle_check(signs.get("wslconfig"), signs.get("build")),
            power_check(signs.get("powercfg")),
            *rules_checks(signs.get("rules"), Ports(), signs["env"].get(MAC_IP_ENV))]


# --- the Windows side, seen from WSL ---

RESTART = "then `wsl --shutdown` in PowerShell (no reboot needed) and open Ubuntu again"
WORDS = {"STANDBYIDLE": "sleep", "HIBERNATEIDLE": "hibernation"}
# One JSON list of the hetlab rules in both firewalls: name, enabled, local ports, remote addresses.
# The Hyper-V rule holds its ports and addresses itself (MSFT_NetFirewallHyperVRule); a Defender rule
# keeps them in its port and address filters (Get-NetFirewallPortFilter, Get-NetFirewallAddressFilter).
RULES_QUERY = (
    "$h = @(Get-NetFirewallHyperVRule -ErrorAction SilentlyContinue -ErrorVariable he | "
    "Where-Object DisplayName -like 'hetlab*' | "
    "ForEach-Object { [pscustomobject]@{ kind = 'hyperv'; name = $_.DisplayName; enabled = [string]$_.Enabled; "
    "ports = @($_.LocalPorts); remote = @($_.RemoteAddresses) } }); "
    "$d = @(Get-NetFirewallRule -DisplayName 'hetlab*' -ErrorAction SilentlyContinue -ErrorVariable de | "
    "ForEach-Object { [pscustomobject]@{ kind = 'defender'; name = $_.DisplayName; enabled = [string]$_.Enabled; "
    "ports = @(($_ | Get-NetFirewallPortFilter).LocalPort); "
    "remote = @(($_ | Get-NetFirewallAddressFilter).RemoteAddress) } }); "
    "$e = @(@($he) + @($de) | Where-Object { $_ } | ForEach-Object { [pscustomobject]@{ kind = 'error'; "
    "name = [string]$_ } }); "
    "ConvertTo-Json -InputObject @($h + $d + $e) -Compress -Depth 3")


def build_check(build: int | None) -> Check:
    """Windows 11 22H2 (build 22621) or newer, or the one line that says no setting helps."""
    if build is None:
        return Check("Windows build", WARN, "could not read Windows' build from WSL (cmd.exe /c ver)",
                     "check it on Windows: winver must show Windows 11 22H2 or newer (build 22621+)")
    problem = wsl.build_problem(build)
    if problem:
        return Check("Windows build", FAIL, problem.split(". ", 1)[0],
                     problem.split(". ", 1)[1])
    return Check("Windows build", OK, f"build {build}: mirrored networking is available (22621+)")


def networking_check(mode: str, seen: str, build: int | None, config: str | None,
                     package: tuple[int, ...] | None) -> Check:
    """Mirrored networking, or why not: an old build, .wslconfig without it, or .wslconfig with it
    while WSL still runs NAT (WSL before 2.0, or no restart since the edit)."""
    if mode == "mirrored":
        return Check("WSL networking", OK, f"mirrored ({seen}): WSL shares Windows' LAN address; "
                                           f"give it to `hetlab head --ip`")
    detail = f"{mode} ({seen}): the Mac cannot reach Ray inside WSL"
    if wsl.build_problem(build):
        return Check("WSL networking", FAIL, detail, f"Windows build {build} has no mirrored networking: "
                                                     f"see the Windows build line")
    asked = config is not None and "wsl2.networkingMode=mirrored" not in wsl.missing(wsl.parse(config))
    if not asked:
        return Check("WSL networking", FAIL, detail, f"in Ubuntu: hetlab wslconfig (puts networkingMode="
                                                     f"mirrored into %UserProfile%\\.wslconfig), {RESTART}")
    old = package is None or package < (2, 0)
    why = ("WSL itself is older than 2.0 (`wsl --version` in PowerShell fails or shows 1.x): `wsl --update`, "
           if old else "WSL has not restarted since the edit: ")
    return Check("WSL networking", FAIL, f".wslconfig says mirrored but WSL runs {mode} ({seen})",
                 f"{why}{RESTART}")


def gpu_check(dxg: bool, wsl_smi: str | None, linux_nvidia_smi: bool) -> Check:
    """NVIDIA's Windows driver, seen from WSL: its nvidia-smi (/usr/lib/wsl/lib) names the card.
    /dev/dxg alone proves nothing (any GPU vendor's driver makes it); a Linux driver inside WSL breaks it."""
    if linux_nvidia_smi:
        return Check("WSL GPU", WARN, "nvidia-smi here is not WSL's (/usr/lib/wsl/lib): a Linux NVIDIA "
                                      "driver or its tools were installed inside WSL",
                     "remove the Linux NVIDIA driver packages from WSL: the Windows driver provides "
                     "CUDA to WSL (NVIDIA's CUDA on WSL guide)")
    cards = [line.split(" (UUID", 1)[0] for line in (wsl_smi or "").splitlines() if line.startswith("GPU ")]
    if not cards:
        seen = "/dev/dxg is there (some GPU driver), but " if dxg else "no /dev/dxg and "
        return Check("WSL GPU", FAIL, f"{seen}no NVIDIA driver: {wsl.WSL_SMI} names no card",
                     "install NVIDIA's Windows driver (on Windows, from nvidia.com; not in WSL), then in "
                     "PowerShell `wsl --update` and `wsl --shutdown`, and open Ubuntu again")
    return Check("WSL GPU", OK, f"NVIDIA's Windows driver: {'; '.join(cards)}")


def idle_check(config: str | None, build: int | None = None) -> Check:
    """WSL stops a distro a while after its last window closes, and the VM after that. Below build
    22621 the course's ``.wslconfig`` does not help (``hetlab wslconfig`` refuses): no advice to run it."""
    problem = wsl.build_problem(build)
    if problem:
        return Check("WSL idle shutdown", WARN, problem.split(". ", 1)[0],
                     "keep an Ubuntu window open during a run")
    if config is None:
        return Check("WSL idle shutdown", WARN, "could not read %UserProfile%\\.wslconfig from here",
                     f"in Ubuntu: hetlab wslconfig, {RESTART}; or keep an Ubuntu window open during a run")
    lacking = [line for line in wsl.missing(wsl.parse(config)) if "IdleTimeout" in line]
    if lacking:
        return Check("WSL idle shutdown", WARN, f".wslconfig lacks {', '.join(lacking)}: WSL may stop "
                                                "mid-run once its windows close",
                     f"in Ubuntu: hetlab wslconfig, {RESTART}; or keep an Ubuntu window open during a run")
    return Check("WSL idle shutdown", OK, ".wslconfig: no idle shutdown (vmIdleTimeout, instanceIdleTimeout -1)")


def power_check(query: str | None) -> Check:
    """Sleep and hibernate on AC power off (``powercfg /query SCHEME_CURRENT SUB_SLEEP``)."""
    values = steps.power_before(query)
    if set(values) != set(steps.POWER_SETTINGS):
        return Check("Windows sleep", WARN, "could not read powercfg's sleep settings from WSL",
                     "in PowerShell as Administrator: " + "; ".join(
                         f"powercfg /change {n} 0" for n in steps.POWER_SETTINGS.values()))
    on = {name: v for name, v in values.items() if v}
    if not on:
        return Check("Windows sleep", OK, "no sleep and no hibernation on AC power")
    said = " and ".join(f"{WORDS[n]} after {v // 60} min" for n, v in on.items())
    return Check("Windows sleep", WARN, f"on AC power Windows goes to {said}: a sleeping desktop ends the run",
                 "in PowerShell as Administrator: " + "; ".join(
                     f"powercfg /change {steps.POWER_SETTINGS[n]} 0" for n in on))


def parse_rules(text: str | None) -> list[dict] | None:
    """The rules ``RULES_QUERY`` printed, or None where PowerShell said nothing readable."""
    try:
        rules = json.loads(text) if text and text.strip() else []
    except ValueError:
        return None
    rules = rules if isinstance(rules, list) else [rules]
    return [{**r, "ports": [str(p) for p in r.get("ports") or []],
             "remote": [str(a) for a in r.get("remote") or []]} for r in rules if isinstance(r, dict)]


def _ports(ranges: list[str]) -> set[int]:
    found = set()
    for r in ranges:
        low, _, high = r.partition("-")
        if low.isdigit() and (high or low).isdigit():
            found |= set(range(int(low), int(high or low) + 1))
    return found


def rules_checks(rules: list[dict] | None, ports: commands.Ports, mac_ip: str | None = None) -> list[Check]:
    """The hetlab rules in both firewalls: Ray's rule admits exactly a node's ports (the head's or a
    joining node's) from one address (the Mac's); Ray Train's, where added, the rendezvous store's."""
    again = "run `hetlab head` (or `hetlab join --windows`) again and paste its part B in PowerShell as Administrator"
    if rules is None:
        return [Check("Windows firewall", WARN, "could not read the firewall rules from WSL (powershell.exe)",
                      "on Windows: Get-NetFirewallHyperVRule and Get-NetFirewallRule -DisplayName 'hetlab*' list them")]
    checks = []
    wanted = {frozenset(ports.listening(head)) for head in (True, False)}
    for name in (steps.RULE, steps.TRAIN_RULE):
        found = {r["kind"]: r for r in rules if r.get("name") == name}
        if name == steps.TRAIN_RULE and not found:
            checks.append(Check("Windows firewall (Ray Train)", OK, "no Ray Train rule: notebook 07 across the "
                                                                    "pair needs it (part B of `hetlab head`)"))
            continue
        label = "Windows firewall" + (" (Ray Train)" if name == steps.TRAIN_RULE else "")
        errors = [r["name"].splitlines()[0] for r in rules if r.get("kind") == "error" and r.get("name")]
        problems = [f"no {kind} rule '{name}'" + (f" (Windows said: {errors[0]})" if errors else "")
                    for kind in ("hyperv", "defender") if kind not in found]
        for kind, rule in found.items():
            have = _ports(rule["ports"])
            if rule.get("enabled") in ("False", "2"):   # NetSecurity's Enabled: True = 1, False = 2
                problems.append(f"the {kind} rule is disabled")
            if name == steps.RULE and frozenset(have) not in wanted:
                problems.append(f"the rule opens {','.join(rule['ports'])}, not this node's Ray ports")
            if name == steps.TRAIN_RULE and have != {ports.train_rendezvous}:
                problems.append(f"the rule opens {','.join(rule['ports'])}, not the rendezvous port "
                                f"{ports.train_rendezvous} alone")
            if len(rule["remote"]) != 1 or rule["remote"][0].lower() == "any":
                problems.append(f"the rule admits {','.join(rule['remote']) or 'anyone'}, not one address")
            elif mac_ip and rule["remote"][0] != mac_ip:
                problems.append(f"the rule admits {rule['remote'][0]}, not the Mac's {mac_ip}")
        remote = next((r["remote"][0] for r in found.values() if len(r["remote"]) == 1), "?")
        problems = list(dict.fromkeys(problems))   # the same finding in both firewalls, said once
        checks.append(Check(label, WARN if problems else OK, "; ".join(problems) if problems else
                            f"'{name}' in both firewalls, from {remote} only", again))
    return checks


def windows_side_signs() -> dict:
    """What the Windows side says, through interop (each None where it cannot be read)."""
    query = wsl.output(["powercfg.exe", "/query", "SCHEME_CURRENT", "SUB_SLEEP"])
    rules = wsl.output(["powershell.exe", "-NoProfile", "-NonInteractive", "-Command", RULES_QUERY])
    return {"powercfg": query, "rules": parse_rules(rules)}


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


def linux_checks(smi_works: bool) -> list[Check]:
    """A Linux desktop (not WSL): its firewall, automatic suspend, and NVIDIA's driver."""
    schema = "org.gnome.settings-daemon.plugins.power"
    pci = {d.name: (_read(str(d / "vendor")) or "", _read(str(d / "class")) or "")
           for d in Path("/sys/bus/pci/devices").glob("*")}
    return [ufw_check(wsl.output(["ufw", "status"]), _read("/etc/ufw/ufw.conf")),
            suspend_check(wsl.output(["gsettings", "get", schema, "sleep-inactive-ac-type"]),
                          wsl.output(["gsettings", "get", schema, "sleep-inactive-ac-timeout"]),
                          wsl.output(["systemctl", "is-enabled", "suspend.target"], any_status=True)),
            *linux_driver_check(nvidia_pci(pci), smi_works)]


def os_checks(system: str, smi_works: bool = False) -> list[Check]:
    """This machine's checks: native Windows, WSL (with the Windows side), a Linux desktop, or a Mac's
    sleep, power, firewall (Ray's programs in it too) and torch.distributed (``hetlab doctor``).
    ``system``: ``platform.system()``; ``smi_works``: nvidia-smi lists a card here."""
    if system == "Darwin":
        import torch
        state = wsl.output([commands.MACOS_FIREWALL, "--getglobalstate"])
        return (mac_power_checks(wsl.output(["pmset", "-g"]), wsl.output(["pmset", "-g", "batt"])) + mac_firewall_check(state)
                + mac_apps_check(state, wsl.output([commands.MACOS_FIREWALL, "--listapps"]), macos_apps())
                + [distributed_check(torch.distributed.is_available())])
    signs = wsl.local_signs()
    if wsl.is_wsl(signs["release"], signs["env"], signs["interop"]):
        return wsl_checks({**signs, **windows_side_signs()})
    if system == "Linux":
        return linux_checks(smi_works)
    return native_windows_check(signs["platform"])
