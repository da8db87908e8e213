"""``hetlab doctor`` (notebooks 00 and 04): whether this machine can join the pair, one line per check.

Each check is a small function that returns a ``Check``: what it found and, when it warns or fails,
the one command that fixes it. This machine first (its saved address, versions, MNIST, devices, Ray's
token, its operating system for a long run), then with ``--head`` the head: Ray and Python from its
GCS, then, as a driver, torch and hetlab there and every node's ports from here. The parsers are pure
functions of a command's text, so the tests supply what other machines print.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from hetlab.cluster.connecting import parse_address, port_open, probe_gcs
from hetlab.core.machine import facts
from hetlab.core.samecode import mismatch
from hetlab.errors import HetlabError
from hetlab.vocab import RAY_PYTHON_MATCH_ENV
from hetlab.windows import wsl

OK, WARN, FAIL = "ok", "warn", "FAIL"
PINNED_PYTHON = "3.11.7"  # environment-mac.yml and environment-cuda.yml (tests/test_envfiles.py checks)
SETUP = "see docs/troubleshooting.md#setup-and-hetlab-doctor"
RESTART = "then `wsl --shutdown` in PowerShell and open Ubuntu again"
HEAD_TIMEOUT_S = 20.0     # hetlab doctor --head: seconds to wait for the head as a driver


@dataclass
class Check:
    """One finding; ``fix`` is the one line that says what to do when ``status`` is not ok."""

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
                     "conda env create -f environment-mac.yml (or environment-cuda.yml)")
    if level == "minor":
        return Check("Python for the pair", OK, f"{here}; the pair pins {pinned}; {RAY_PYTHON_MATCH_ENV}=minor "
                                                f"lets another patch join (with a warning)")
    return Check("Python for the pair", WARN, f"{here}; the pair pins {pinned}: Ray refuses a node whose patch "
                                              f"differs from the head's",
                 f"python={pinned} on both machines, or {RAY_PYTHON_MATCH_ENV}=minor on every node and driver")


def compare_versions(here: dict, head: dict, python_match: str | None = None) -> list[Check]:
    """This machine's facts against the head's (``facts()`` shapes, any subset of keys), one Check
    per fact both report: Ray exactly (FAIL), Python to the match level, torch by release (WARN: models
    and tensors are pickled between nodes), hetlab's version and commit."""
    level, checks = _level(python_match), []
    if "ray" in here and "ray" in head:
        checks.append(Check("Ray version", OK if here["ray"] == head["ray"] else FAIL,
                            f"here {here['ray']}, head {head['ray']}", f"pip install 'ray[default,train]=={head['ray']}'"))
    if "python" in here and "python" in head:
        mine, theirs = here["python"].split("."), head["python"].split(".")
        minor = mine[:2] == theirs[:2]
        checks.append(Check("Python version", OK if mine == theirs else WARN if minor and level == "minor" else FAIL,
                            f"here {here['python']}, head {head['python']} (match level {level})",
                            f"python={head['python']} here (conda)"
                            + (f", or {RAY_PYTHON_MATCH_ENV}=minor on every node and driver" if minor else "")))
    if "torch" in here and "torch" in head:
        base = {side: str(facts["torch"]).split("+", 1)[0] for side, facts in (("here", here), ("head", head))}
        checks.append(Check("torch version", OK if base["here"] == base["head"] else WARN,
                            f"here {here['torch']}, head {head['torch']}", f"pip install torch=={base['head']}"))
    if "hetlab" in here and "hetlab" in head:
        mine, theirs = here.get("hetlab_commit"), head.get("hetlab_commit")
        problem = mismatch("the head", {"hetlab": head["hetlab"], "commit": theirs},
                           {"this machine": {"hetlab": here["hetlab"], "commit": mine}})
        checks.append(Check("hetlab version", FAIL if problem else OK,
                            f"here {here['hetlab']}" + (f" ({mine})" if mine else "")
                            + f", head {head['hetlab']}" + (f" ({theirs})" if theirs else ""), problem or ""))
    return checks


# --- this machine: devices and Ray's token ---

def accelerator_check(found: str, usable: bool, system: str, arch: str, smi_works: bool,
                      torch_cuda: str | None = None) -> Check:
    """The devices torch can use here. A desktop whose nvidia-smi lists a card that this torch cannot
    use FAILs (Ray still reports the GPU, so a worker would hold it and compute on the CPU); a Mac whose
    torch cannot use MPS WARNs. ``system``: ``platform.system()``, or ``"WSL"``; ``smi_works``:
    nvidia-smi lists a card (in WSL, the Windows driver's, /usr/lib/wsl/lib)."""
    if not usable and system in ("Linux", "WSL", "Windows") and smi_works:
        return Check("devices", FAIL, f"{found}: nvidia-smi sees an NVIDIA card, but this torch cannot use it "
                     f"(its CUDA: {torch_cuda or 'none, a CPU build'})", f"environment-cuda.yml's torch; {SETUP}")
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


# --- the operating system: WSL on a Windows desktop ---

def networking_check(wslinfo: str | None, build: int | None) -> Check:
    """Mirrored networking, or why not: a Windows too old for it, or ``hetlab wslconfig`` to turn it on."""
    mode = wsl.networking_mode(wslinfo)
    if mode == "mirrored":
        return Check("WSL networking", OK, "mirrored: give Windows' LAN address to `hetlab head --ip`")
    if problem := wsl.build_problem(build):
        return Check("WSL networking", FAIL, problem.split(". ", 1)[0], "Settings > Windows Update; winver shows the build")
    return Check("WSL networking", FAIL, f"{mode}: the Mac cannot reach Ray inside WSL",
                 f"hetlab wslconfig, {RESTART} (mirrored needs WSL 2.0+: `wsl --update`)")


# --- a Linux desktop and a Mac: asleep, it ends the run ---

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
                 "gsettings set org.gnome.settings-daemon.plugins.power sleep-inactive-ac-type 'nothing'")


def mac_sleep_check(pmset_g: str | None, pmset_batt: str | None) -> list[Check]:
    """Whether the Mac stays awake for a run: on the charger (``pmset -g batt``: "Now drawing from
    '...'") with no idle system sleep (``pmset -g``'s ``sleep``, 0 = never); nothing where pmset said nothing."""
    source = re.search(r"drawing from '([^']+)'", pmset_batt or "")
    sleep = re.search(r"^\s*sleep\s+(\d+)", pmset_g or "", flags=re.M)
    if not (source or sleep):
        return []
    found = []
    if source and source.group(1) != "AC Power":
        found.append(f"on battery ({source.group(1)}): a long run drains it")
    if sleep and int(sleep.group(1)):
        found.append(f"the Mac sleeps after {sleep.group(1)} min idle (pmset sleep {sleep.group(1)}): asleep, "
                     f"it drops out of the cluster")
    return [Check("Mac sleep", WARN if found else OK, "; ".join(found) or "awake for a run",
                  "on the charger, caffeinate -dims in a second Terminal during a run")]


def os_checks(system: str) -> list[Check]:
    """This machine's operating system: a Mac, WSL (with Windows' build behind it), a Linux desktop,
    or native Windows. ``system``: ``platform.system()``."""
    if system == "Darwin":
        return mac_sleep_check(wsl.output(["pmset", "-g"]), wsl.output(["pmset", "-g", "batt"]))
    if wsl.in_wsl():
        return [networking_check(wsl.output(["wslinfo", "--networking-mode"]),
                                 wsl.windows_build(wsl.output(["cmd.exe", "/c", "ver"])))]
    if system != "Linux":
        return [Check("Windows", FAIL, wsl.NATIVE, "wsl --install -d Ubuntu (PowerShell as Administrator), "
                      "then run hetlab there")] if sys.platform == "win32" else []
    gnome = ["gsettings", "get", "org.gnome.settings-daemon.plugins.power"]
    return [suspend_check(wsl.output([*gnome, "sleep-inactive-ac-type"]), wsl.output([*gnome, "sleep-inactive-ac-timeout"]),
                          wsl.output(["systemctl", "is-enabled", "suspend.target"], any_status=True))]


def local_checks() -> list[Check]:
    """This machine: what it is and runs, its operating system, Python, MNIST, devices and Ray's token."""
    import torch

    from hetlab.core import devices
    report = facts()
    smi = shutil.which("nvidia-smi", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/lib/wsl/lib"]))
    smi_works = smi is not None and (wsl.output([smi, "-L"], timeout=10) or "").startswith("GPU ")
    system = "WSL" if wsl.in_wsl() else platform.system()
    commit = f" ({report['hetlab_commit']})" if report["hetlab_commit"] else ""
    checks = [Check("this machine", OK, f"{report['hostname']}, {report['os']}, {report['cpus']} CPUs, "
                                        f"{report['memory_gb']} GiB; Python {report['python']}, Ray {report['ray']}, "
                                        f"torch {report['torch']}, hetlab {report['hetlab']}{commit}"),
              *os_checks(platform.system()),
              python_check(report["python"]),
              Check("MNIST files", OK if report["mnist"] == "verified" else FAIL, report["mnist"],
                    "git checkout -- data/"),
              accelerator_check(f"{', '.join(devices.available())}; accelerator: {report['accelerator']}",
                                report["accelerator"] != "none", system, platform.machine(), smi_works,
                                torch.version.cuda)]
    return checks + token_file_checks()


# --- the head ---

def head_checks(address: str) -> list[Check]:
    """Reach the head, compare what it runs with here, then (as a driver) probe every node's ports.
    Ray and Python are read from the head's GCS before connecting (a mismatch would make the connection
    itself fail); torch and hetlab from the task ``cluster.nodes()`` runs on each node."""
    import json

    from hetlab import cluster
    host, port, timeout = *parse_address(address), HEAD_TIMEOUT_S
    firewall = "see docs/troubleshooting.md#firewall-and-token"
    problem = port_open(host, port, timeout=min(3.0, timeout))
    if problem:
        return [Check("head GCS port", FAIL, f"{host}:{port}: {problem}",
                      f"`hetlab head --ip {shlex.quote(host)}` on the head; {firewall}")]
    checks = [Check("head GCS port", OK, f"{host}:{port} accepts connections")]
    cluster.token_mode()  # as a notebook's driver does: the pair always runs with token auth
    problem = probe_gcs(host, port, timeout=min(5.0, timeout))
    if problem:
        return checks + [Check("head answers", FAIL, problem, firewall)]
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
        return checks + [Check("driver connection", WARN, str(exc), "run the `ray start` line from `hetlab join` here first")]
    try:
        rows = cluster.nodes()
        head = next((r for r in rows if r.get("is_head")), rows[0])
        checks.append(Check("driver connection", OK, f"{len(rows)} node(s): " + ", ".join(r["name"] for r in rows)))
        after = ("torch version", "hetlab version")   # known once connected
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


def checks(head: str | None = None) -> list[Check]:
    """Every check of this machine, and with ``head`` of the cluster (``hetlab doctor``)."""
    found = local_checks()
    if head:
        found += head_checks(head)
    return found


def render(found: list[Check]) -> str:
    """Checks as text, one per line, with a verdict at the end."""
    failed = [c for c in found if not c.ok]
    verdict = "all checks passed" if not failed else f"{len(failed)} check(s) failed: fix them top to bottom"
    return "\n".join([str(c) for c in found] + [verdict])
