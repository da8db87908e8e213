"""``hetlab doctor`` (notebooks 00 and 04): whether this machine can join the pair, one line per check.

Each check is a small function that returns a ``Check``: what it found and, when it warns or fails,
how to fix it (docs/troubleshooting.md lists every one). This machine first: the saved pair's address,
Python against the pair's pin, versions, MNIST, the devices torch can use, Ray's token, then its
operating system for a long run (native Windows; WSL and the Windows side, through WSL's interop; a
Linux desktop's firewall, suspend and NVIDIA driver; a Mac's power, sleep, firewall and
torch.distributed). With ``--head``, the head: its port, its answer, Ray and Python read from its GCS
(Ray refuses a node whose Ray differs, or whose Python differs to the patch by default), then, as a
driver, torch, hetlab and MNIST on the head and every node's ports from here. The parsers are pure
functions of a command's text, so the tests supply what machines that do not exist here print.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from hetlab.cluster import commands, joining
from hetlab.cluster.connecting import parse_address, port_open, probe_gcs
from hetlab.core.machine import facts
from hetlab.core.samecode import mismatch
from hetlab.errors import HetlabError
from hetlab.vocab import Ports, RAY_AUTH_ENV, RAY_MAC_CLUSTER_ENV, RAY_PYTHON_MATCH_ENV
from hetlab.windows import steps, wsl

OK, WARN, FAIL = "ok", "warn", "FAIL"
PINNED_PYTHON = "3.11.7"  # environment-mac.yml and environment-cuda.yml (tests/test_envfiles.py checks)
RESTART = "then `wsl --shutdown` in PowerShell (no reboot needed) and open Ubuntu again"


@dataclass
class Check:
    """One finding; ``fix`` says what to do when ``status`` is not ok."""

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


# --- versions: this machine against the pin and against the head ---

def _level(level: str | None) -> str:
    level = level or os.environ.get(RAY_PYTHON_MATCH_ENV, "patch")
    if level not in ("patch", "minor"):
        raise HetlabError(f"{RAY_PYTHON_MATCH_ENV}={level!r}: use 'patch' (Ray's default) or 'minor'.")
    return level


def python_check(here: str | None = None, pinned: str = PINNED_PYTHON, level: str | None = None) -> Check:
    """This Python against the pair's pin. Only the head's Python really matters (``compare_versions``),
    but two machines that both match the pin always match each other."""
    here, level = here or platform.python_version(), _level(level)
    mine, pin = here.split("."), pinned.split(".")
    if mine == pin:
        return Check("Python for the pair", OK, f"{here} = the pin in environment-*.yml")
    if mine[:2] != pin[:2]:
        return Check("Python for the pair", FAIL, f"{here}; the pair pins {pinned}",
                     f"use the course's environment: conda env create -f environment-mac.yml (or "
                     f"-cuda.yml), which installs Python {pinned}")
    fix = (f"install Python {pinned} on both machines (conda: python={pinned}), or set {RAY_PYTHON_MATCH_ENV}=minor "
           f"on every node and driver (Ray then joins {'.'.join(pin[:2])}.x with a warning)")
    if level == "minor":
        return Check("Python for the pair", OK, f"{here}; the pair pins {pinned}; {RAY_PYTHON_MATCH_ENV}=minor lets "
                                                f"another patch join (with a warning)", fix)
    return Check("Python for the pair", WARN, f"{here}; the pair pins {pinned}: Ray refuses a node whose patch "
                                              f"differs from the head's (match level patch)", fix)


def compare_versions(here: dict, head: dict, python_match: str | None = None) -> list[Check]:
    """This machine's facts against the head's (``facts()`` shapes, any subset of keys), one Check
    per fact both report: Ray exactly (FAIL), Python to the match level, torch by release (WARN: models
    and tensors are pickled between nodes), hetlab's version and commit, and the MNIST files."""
    level, checks = _level(python_match), []
    if "ray" in here and "ray" in head:
        checks.append(Check("Ray version", OK if here["ray"] == head["ray"] else FAIL,
                            f"here {here['ray']}, head {head['ray']}",
                            f"install the head's Ray here: pip install 'ray[default,train]=={head['ray']}'"))
    if "python" in here and "python" in head:
        mine, theirs = here["python"].split("."), head["python"].split(".")
        minor = mine[:2] == theirs[:2]
        checks.append(Check("Python version", OK if mine == theirs else WARN if minor and level == "minor" else FAIL,
                            f"here {here['python']}, head {head['python']} (match level {level})",
                            f"use Python {head['python']} here (conda: python={head['python']})"
                            + (f", or set {RAY_PYTHON_MATCH_ENV}=minor on every node and driver" if minor else "")))
    if "torch" in here and "torch" in head:
        base = {side: str(facts["torch"]).split("+", 1)[0] for side, facts in (("here", here), ("head", head))}
        checks.append(Check("torch version", OK if base["here"] == base["head"] else WARN,
                            f"here {here['torch']}, head {head['torch']}",
                            f"install torch=={base['head']} here (models and tensors are pickled "
                            f"between nodes; another release may not load them)"))
    if "hetlab" in here and "hetlab" in head:
        mine, theirs = here.get("hetlab_commit"), head.get("hetlab_commit")
        problem = mismatch("the head", {"hetlab": head["hetlab"], "commit": theirs},
                           {"this machine": {"hetlab": here["hetlab"], "commit": mine}})
        checks.append(Check("hetlab version", FAIL if problem else OK,
                            f"here {here['hetlab']}" + (f" ({mine})" if mine else "")
                            + f", head {head['hetlab']}" + (f" ({theirs})" if theirs else ""), problem or ""))
    if "mnist_sha256" in here and "mnist_sha256" in head:
        from hetlab.core.data import SHA256
        mine, theirs = here["mnist_sha256"], head["mnist_sha256"]
        differ = [n for n in sorted(set(mine) | set(theirs)) if mine.get(n) != theirs.get(n) or mine.get(n) is None]
        where = " and ".join(w for w, facts in (("here", mine), ("on the head", theirs))
                             if any(facts.get(n) != SHA256.get(n) for n in differ)) or "somewhere"
        checks.append(Check("MNIST files", FAIL if differ else OK,
                            f"{', '.join(differ)} differ between here and the head" if differ
                            else f"the same {len(mine)} files here and on the head (sha256)",
                            f"restore MNIST {where}: git checkout -- data/ in that machine's hetlab folder"))
    if "gloo" in here and "gloo" in head:                # notebook 07: why Ray Train does not use gloo here
        meet = (f"gloo speaks {here['gloo']} here and {head['gloo']} on the head, and the two never meet"
                if here["gloo"] != head["gloo"] else f"gloo speaks {here['gloo']} on both")
        checks.append(Check("Ray Train exchange", OK, f"{meet}: Ray Train uses hetlab's exchange, through the "
                            f"rendezvous store (TCP {Ports.train_rendezvous} on the desktop)"))
    return checks


# --- this machine: devices, Ray's token, a Mac's opt-in ---

CUDA_FIX = {  # the CPU-only torch on a machine with an NVIDIA card, per system
    "Linux": "install the CUDA build (environment-cuda.yml: PyPI's Linux torch is it) and a driver at "
             "least as new as that CUDA (nvidia-smi shows the newest it supports)",
    "WSL": "install the CUDA build (environment-cuda.yml: PyPI's Linux torch is it) and NVIDIA's Windows "
           "driver at least as new as that CUDA, on Windows (no Linux NVIDIA driver inside WSL)",
    "Windows": "PyPI's torch for Windows is a CPU build: run the course inside WSL2 (README, \"Windows "
               "desktop\"); natively, the CUDA wheels come from PyTorch's own index (pytorch.org's "
               "install selector gives the pip line)",
}


def accelerator_check(found: str, usable: bool, system: str, arch: str, nvidia_card: bool,
                      torch_cuda: str | None = None) -> Check:
    """The devices torch can use here. An NVIDIA desktop whose torch cannot use the card FAILs (Ray
    still reports the GPU, so a worker would hold it and compute on the CPU); a Mac whose torch cannot
    use MPS WARNs. ``system``: ``platform.system()``, or ``"WSL"``; ``torch_cuda``: ``torch.version.cuda``."""
    if not usable and system in CUDA_FIX and nvidia_card:
        return Check("devices", FAIL, f"{found}: nvidia-smi sees an NVIDIA card, but this torch cannot use it "
                     f"(its CUDA: {torch_cuda or 'none, a CPU build'})", CUDA_FIX[system])
    if not usable and system == "Darwin" and arch == "arm64":
        return Check("devices", WARN, f"{found}: torch cannot use this Apple Silicon Mac's GPU (MPS)",
                     "macOS 12.3 or newer, and environment-mac.yml built by an arm64 conda")
    return Check("devices", OK, found)


def token_file_checks() -> list[Check]:
    """FAIL while a token file Ray would read (``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``) is open
    to group or others: anyone who can read it can run code on the cluster."""
    from hetlab.cluster.connecting import OPEN_BITS, token_files
    checks = []
    for path in token_files():
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            continue
        shown = str(path).replace(str(Path.home()), "~", 1) if path.is_relative_to(Path.home()) else str(path)
        exposed = bool(mode & OPEN_BITS)
        checks.append(Check("token file", FAIL if exposed else OK, f"{shown} has mode {mode:04o}"
                            + (" (others on this machine can read the token)" if exposed else ""), f"chmod 600 {shown}"))
    return checks


def macos_checks() -> list[Check]:
    """``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` belongs on the Mac's ``ray start`` line (``hetlab join``
    prints it): exported for every process, it moves even a local Ray off 127.0.0.1."""
    if platform.system() != "Darwin":
        return []
    exported = os.environ.get(RAY_MAC_CLUSTER_ENV)
    return [Check("macOS cluster opt-in", WARN if exported is not None else OK,
                  f"{RAY_MAC_CLUSTER_ENV}={exported} for every process of this shell" if exported is not None
                  else f"{RAY_MAC_CLUSTER_ENV} is not exported; the `ray start` line from `hetlab join` sets it",
                  f"unset {RAY_MAC_CLUSTER_ENV} (it moves even a local Ray off 127.0.0.1); keep it only on the "
                  f"`ray start` line that `hetlab join` prints")]


# --- the operating system: native Windows, WSL and the Windows side ---

def native_windows_check(platform_name: str) -> list[Check]:
    """On native Windows, the one line that sends the course into WSL2."""
    if platform_name != "win32":
        return []
    return [Check("Windows", FAIL, wsl.NATIVE, "install WSL2 with Ubuntu (PowerShell as Administrator: wsl "
                  "--install -d Ubuntu), then run hetlab there (README, \"Windows desktop\")")]


def wsl_checks(signs: dict) -> list[Check]:
    """Inside WSL: its version, Windows' build, networking mode, NVIDIA's driver, idle settings and
    Windows' sleep, from ``wsl.local_signs()`` and powercfg's answer (``signs["powercfg"]``)."""
    release, env = signs["release"], signs["env"]
    if not wsl.is_wsl(release, env, signs.get("interop", False)):
        return []
    if wsl.wsl_version(release) == 1:
        return [Check("WSL", FAIL, f"WSL 1 (kernel {release}): no GPU and no network of its own",
                      f"convert it: wsl --set-version {env.get('WSL_DISTRO_NAME', 'Ubuntu')} 2 "
                      f"(PowerShell), then open Ubuntu again")]
    route_ip, build, config = signs.get("route_ip"), signs.get("build"), signs.get("wslconfig")
    mode = wsl.networking_mode(signs.get("wslinfo"), route_ip, signs.get("route_mac"))
    seen = f"default route on {route_ip}" if route_ip else "no default route"
    return [Check("WSL", OK, f"WSL 2 (kernel {release}), distro {env.get('WSL_DISTRO_NAME', '?')}"),
            build_check(build), networking_check(mode, seen, build, config, signs.get("wsl_package")),
            gpu_check(signs.get("dxg", False), signs.get("wsl_smi"), signs.get("linux_nvidia_smi", False)),
            idle_check(config, build), power_check(signs.get("powercfg"))]


def build_check(build: int | None) -> Check:
    """Windows 11 22H2 (build 22621) or newer, or the one line that says no setting helps."""
    if build is None:
        return Check("Windows build", WARN, "could not read Windows' build from WSL (cmd.exe /c ver)",
                     "check it on Windows: winver must show Windows 11 22H2 or newer (build 22621+)")
    problem = wsl.build_problem(build)
    if problem:
        return Check("Windows build", FAIL, *problem.split(". ", 1))
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
    if config is None or "wsl2.networkingMode=mirrored" in wsl.missing(wsl.parse(config)):
        return Check("WSL networking", FAIL, detail, f"in Ubuntu: hetlab wslconfig (puts networkingMode="
                                                     f"mirrored into %UserProfile%\\.wslconfig), {RESTART}")
    why = ("WSL itself is older than 2.0 (`wsl --version` in PowerShell fails or shows 1.x): `wsl --update`, "
           if package is None or package < (2, 0) else "WSL has not restarted since the edit: ")
    return Check("WSL networking", FAIL, f".wslconfig says mirrored but WSL runs {mode} ({seen})", why + RESTART)


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
    problem, window = wsl.build_problem(build), "keep an Ubuntu window open during a run"
    if problem:
        return Check("WSL idle shutdown", WARN, problem.split(". ", 1)[0], window)
    if config is None:
        return Check("WSL idle shutdown", WARN, "could not read %UserProfile%\\.wslconfig from here",
                     f"in Ubuntu: hetlab wslconfig, {RESTART}; or {window}")
    lacking = [line for line in wsl.missing(wsl.parse(config)) if "IdleTimeout" in line]
    if lacking:
        return Check("WSL idle shutdown", WARN, f".wslconfig lacks {', '.join(lacking)}: WSL may stop "
                                                "mid-run once its windows close", f"in Ubuntu: hetlab wslconfig, {RESTART}; or {window}")
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
    words = {"STANDBYIDLE": "sleep", "HIBERNATEIDLE": "hibernation"}
    said = " and ".join(f"{words[n]} after {v // 60} min" for n, v in on.items())
    return Check("Windows sleep", WARN, f"on AC power Windows goes to {said}: a sleeping desktop ends the run",
                 "in PowerShell as Administrator: " + "; ".join(f"powercfg /change {steps.POWER_SETTINGS[n]} 0" for n in on))


# --- a Linux desktop: the firewall, automatic suspend, NVIDIA's driver ---

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
    return [Check("NVIDIA driver", FAIL, "an NVIDIA card is on the PCI bus, but nvidia-smi lists none: no NVIDIA "
                  "driver", "install it: sudo ubuntu-drivers install, then reboot (nvidia-smi must list the card)")]


# --- a Mac: power, sleep, the firewall, torch.distributed ---

def mac_power_checks(pmset_g: str | None, pmset_batt: str | None) -> list[Check]:
    """The power source (``pmset -g batt``: "Now drawing from '...'") and the idle minutes before system
    sleep (``pmset -g``'s ``sleep``, 0 = never), each with its fix; nothing where pmset said nothing."""
    checks = []
    if source := re.search(r"drawing from '([^']+)'", pmset_batt or ""):
        on_ac = source.group(1) == "AC Power"
        checks.append(Check("Mac power", OK if on_ac else WARN, "on the charger" if on_ac else
                            f"on battery ({source.group(1)}): a long run drains it, and the battery's sleep settings apply",
                            "plug in the charger for a run (caffeinate -s keeps it awake only on AC power)"))
    if sleep := re.search(r"^\s*sleep\s+(\d+)", pmset_g or "", flags=re.M):
        minutes = int(sleep.group(1))
        checks.append(Check("Mac sleep", OK if minutes == 0 else WARN, "system sleep off (pmset sleep 0)" if minutes == 0
                            else f"the Mac sleeps after {minutes} min idle (pmset sleep {minutes}): asleep, "
                                 f"it drops out of the cluster",
                            "during a run: caffeinate -dims in a second Terminal (Ctrl-C ends it), lid open; "
                            "or on the charger for good: sudo pmset -c sleep 0"))
    return checks


def mac_firewall_check(state: str | None) -> list[Check]:
    """The Mac's application firewall (``socketfilterfw --getglobalstate``): off by default, then nothing
    filters what comes in; "block all" stops the desktop's connections to Ray."""
    match = re.search(r"State = (\d)", state or "")
    if not match:
        return []
    allow = "then allow Ray's programs (the socketfilterfw lines `hetlab join` prints)"
    if match.group(1) == "0":
        return [Check("Mac firewall", WARN, "the application firewall is off: nothing filters incoming "
                                            "connections to this Mac",
                      f"sudo {commands.MACOS_FIREWALL} --setglobalstate on (or System Settings > Network > "
                      f"Firewall), {allow}")]
    if match.group(1) == "2":
        return [Check("Mac firewall", WARN, "the firewall blocks all incoming connections: the desktop cannot "
                                            "reach Ray on this Mac",
                      f"turn off \"Block all incoming connections\" (System Settings > Network > Firewall > "
                      f"Options), {allow}")]
    return [Check("Mac firewall", OK, "the application firewall is on; `hetlab join` prints the lines that "
                                      "allow Ray's programs")]


def distributed_check(available: bool) -> Check:
    """``torch.distributed`` in this torch: notebook 07's ranks build their process group with it."""
    if available:
        return Check("torch.distributed", OK, "available (notebook 07's Ray Train ranks use it)")
    return Check("torch.distributed", WARN, "this torch was built without torch.distributed: notebook 07 (Ray "
                                            "Train) cannot run its rank here; notebooks 05, 06, 08 can",
                 "install the course's torch: conda env create -f environment-mac.yml (or update the env from it)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def os_checks(system: str, smi_works: bool = False) -> list[Check]:
    """This machine's operating system: a Mac, WSL (with the Windows side), a Linux desktop, or native
    Windows. ``system``: ``platform.system()``; ``smi_works``: nvidia-smi lists a card here."""
    if system == "Darwin":
        import torch
        return (mac_power_checks(wsl.output(["pmset", "-g"]), wsl.output(["pmset", "-g", "batt"]))
                + mac_firewall_check(wsl.output([commands.MACOS_FIREWALL, "--getglobalstate"]))
                + [distributed_check(torch.distributed.is_available())])
    signs = wsl.local_signs()
    if wsl.is_wsl(signs["release"], signs["env"], signs["interop"]):
        return wsl_checks({**signs, "powercfg": wsl.output(["powercfg.exe", "/query", "SCHEME_CURRENT", "SUB_SLEEP"])})
    if system != "Linux":
        return native_windows_check(signs["platform"])
    gnome = ["gsettings", "get", "org.gnome.settings-daemon.plugins.power"]
    pci = {d.name: (_read(d / "vendor") or "", _read(d / "class") or "") for d in Path("/sys/bus/pci/devices").glob("*")}
    return [ufw_check(wsl.output(["ufw", "status"]), _read(Path("/etc/ufw/ufw.conf"))),
            suspend_check(wsl.output([*gnome, "sleep-inactive-ac-type"]), wsl.output([*gnome, "sleep-inactive-ac-timeout"]),
                          wsl.output(["systemctl", "is-enabled", "suspend.target"], any_status=True)),
            *linux_driver_check(nvidia_pci(pci), smi_works)]


def local_checks() -> list[Check]:
    """This machine: what it is, its operating system, versions, Python, MNIST, devices and Ray's token."""
    import torch

    from hetlab.core import devices
    report = facts()
    smi = shutil.which("nvidia-smi", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/lib/wsl/lib"]))
    card = smi is not None and wsl.output([smi, "-L"], timeout=10) is not None   # the driver sees a card
    checks = [Check("this machine", OK, f"{report['hostname']}, {report['os']}, {report['cpus']} CPUs, "
                                        f"{report['memory_gb']} GiB"),
              *os_checks(platform.system(), card),
              Check("versions", OK, f"Python {report['python']}, Ray {report['ray']}, torch {report['torch']}, "
                                    f"hetlab {report['hetlab']}"
                                    + (f" ({report['hetlab_commit']})" if report['hetlab_commit'] else "")),
              python_check(report["python"]),
              Check("MNIST files", OK if report["mnist"] == "verified" else FAIL, report["mnist"],
                    "restore them: git checkout -- data/"),
              accelerator_check(f"{', '.join(devices.available())}; accelerator: {report['accelerator']}",
                                report["accelerator"] != "none", "WSL" if wsl.in_wsl() else platform.system(),
                                platform.machine(), card, torch.version.cuda)]
    if os.environ.get(RAY_AUTH_ENV, "").lower() != "token":
        checks.append(Check("token auth", WARN, f"{RAY_AUTH_ENV} is not 'token' in this shell (hetlab's notebooks "
                            f"and commands turn it on for the pair; `ray` commands here do not)",
                            f"export {RAY_AUTH_ENV}=token before a `ray` command such as `ray status`, and keep "
                            "the head's token in ~/.ray/auth_token (chmod 600)"))
    return checks + token_file_checks() + macos_checks()


# --- the head ---

def head_checks(address: str, timeout: float = 10.0) -> list[Check]:
    """Reach the head, compare what it runs with here, then (as a driver) probe every node's ports.
    Ray and Python are read from the head's GCS before connecting (a mismatch would make the connection
    itself fail); torch, hetlab and MNIST from the task ``cluster.nodes()`` runs on each node."""
    import json

    from hetlab import cluster
    host, port = parse_address(address)
    timeout = cluster.check_timeout(timeout)
    problem = port_open(host, port, timeout=min(3.0, timeout))
    if problem:
        return [Check("head GCS port", FAIL, f"{host}:{port}: {problem}",
                      f"start the head (`hetlab head --ip {shlex.quote(host)}` prints the command) and open TCP "
                      f"{port} on its firewall for this machine's IP")]
    checks = [Check("head GCS port", OK, f"{host}:{port} accepts connections")]
    cluster.token_mode()  # as a notebook's driver does: the pair always runs with token auth
    problem = probe_gcs(host, port, timeout=min(5.0, timeout))
    if problem:
        fix = (f"export {RAY_AUTH_ENV}=token and put the head's token (`ray get-auth-token` there) in "
               "~/.ray/auth_token here, chmod 600 (`hetlab join` prints how)" if "token" in problem
               else "install the head's exact Ray and Python versions here" if "version" in problem
               else f"check `hetlab head --ip {shlex.quote(host)}` was run there and the port is the GCS port")
        return checks + [Check("head answers", FAIL, problem, fix)]
    checks.append(Check("head answers", OK, "Ray's GCS answered and accepted this machine's token"))
    from ray._raylet import GcsClient
    meta = json.loads(GcsClient(address=f"{host}:{port}").internal_kv_get(b"CLUSTER_METADATA", namespace=b"cluster"))
    here = facts()
    checks += compare_versions(here, {"ray": meta["ray_version"], "python": meta["python_version"]})
    if not all(c.ok for c in checks):
        return checks
    try:
        cluster.connect(f"{host}:{port}", timeout=timeout, same_code=False)  # compared below, as a check
    except HetlabError as exc:
        return checks + [Check("driver connection", WARN, str(exc), "a notebook connects from a machine that is "
                               "a node: run the `ray start` command from `hetlab join` here first")]
    try:
        rows = cluster.nodes()
        head = next((r for r in rows if r.get("is_head")), rows[0])
        checks.append(Check("driver connection", OK, f"{len(rows)} node(s): " + ", ".join(r["name"] for r in rows)))
        after = ("torch version", "hetlab version", "MNIST files", "Ray Train exchange")   # known once connected
        checks += [c for c in compare_versions(here, head) if c.name in after]
        for row in rows:                                # from here, each node's Ray ports as it reports them
            closed = [f"{name} {p}" for name, p in row.get("ports", {}).items()
                      if p and port_open(row["ip"], int(p), timeout=min(3.0, timeout))]
            checks.append(Check(f"ports of {row['name']}", FAIL if closed else OK,
                                f"{row['ip']}: " + (", ".join(closed) + " unreachable" if closed else "all reachable from here"),
                                f"open those TCP ports on {row['name']}'s firewall for this machine's IP"))
    finally:
        import ray
        ray.shutdown()
    return checks


def pair_check(head: str | None) -> list[Check]:
    """Day two: does this machine still hold its address in the pair notebook 04 saved (``cluster.joining``)?
    With ``head`` this is the joining machine (the Mac), else the machine whose saved address it holds."""
    from hetlab.cluster.connecting import requested_address
    pair = requested_address().pair
    if pair is None:
        return []
    here = joining.addresses_here()
    role = joining.role_here(pair, here) or ("mac" if head or platform.system() == "Darwin" else "desktop")
    problem = joining.check(pair, role, here)
    return [Check("saved pair", FAIL if problem else OK, problem or f"{pair}: this machine holds the {role}'s")]


def checks(head: str | None = None, timeout: float = 10.0) -> list[Check]:
    """Every check of this machine, and with ``head`` of the cluster (``hetlab doctor``). When this
    machine's saved address moved, the head is not tried: its firewall admits the old address only."""
    pair = pair_check(head)
    found = pair + local_checks()
    if head and all(c.ok for c in pair):
        found += head_checks(head, timeout=timeout)
    return found


def render(found: list[Check]) -> str:
    """Checks as text, one per line, with a verdict at the end."""
    failed = [c for c in found if not c.ok]
    verdict = "all checks passed" if not failed else f"{len(failed)} check(s) failed: fix them top to bottom"
    return "\n".join([str(c) for c in found] + [verdict])
