"""Preflight: whether this machine can join the head (``hetlab doctor``, notebook 04).

Ray refuses a node or driver whose Ray differs from the head's, and by default
whose Python differs down to the patch (``RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL``,
default ``"patch"``, in ``ray/_private/utils.py``). A Mac must opt in to
multi-node clusters (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``, on its ``ray start`` line
only). Each check here
says what it found and, when it fails, how to fix it.
"""
from __future__ import annotations

import os
import platform
import shlex
import shutil
import stat
from pathlib import Path

from hetlab.errors import HetlabError
from hetlab.cluster import joining
from hetlab.cluster.connecting import parse_address, port_open, probe_gcs
from hetlab.core.machine import facts
from hetlab.core.samecode import mismatch
from hetlab.tools.doctor import oschecks
from hetlab.tools.doctor.oschecks import FAIL, OK, WARN, Check  # noqa: F401 - preflight.OK … as the notebooks name them
from hetlab.windows import wsl
from hetlab.vocab import RAY_AUTH_ENV, RAY_MAC_CLUSTER_ENV, RAY_PYTHON_MATCH_ENV, Ports

PINNED_PYTHON = "3.11.7"  # environment-mac.yml and environment-cuda.yml (tests/test_envfiles.py checks)


def python_check(here: str | None = None, pinned: str = PINNED_PYTHON, level: str | None = None) -> Check:
    """This Python against the pair's pin (3.11.7 in environment-*.yml).

    Only the head's Python really matters (``compare_versions``), but two machines that
    both match the pin always match each other: the venv route (``make lab``) and the conda
    route can differ in the patch.
    """
    here = here or platform.python_version()
    level = _level(level)
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


def _level(level: str | None) -> str:
    level = level or os.environ.get(RAY_PYTHON_MATCH_ENV, "patch")
    if level not in ("patch", "minor"):
        raise HetlabError(f"{RAY_PYTHON_MATCH_ENV}={level!r}: use 'patch' (Ray's default) or 'minor'.")
    return level


def _base(version: str) -> str:
    return str(version).split("+", 1)[0]  # "2.13.0+cu128" and "2.13.0" are the same release


def compare_versions(here: dict, head: dict, python_match: str | None = None) -> list[Check]:
    """This machine's facts against the head's: one Check per fact both sides report.

    Ray must match exactly (FAIL), Python to the match level (``patch``: FAIL;
    ``minor``: a different patch WARNs), torch by release (WARN: it usually works, but
    models and tensors are pickled between nodes), hetlab's version (FAIL: both run
    hetlab's code) and commit (WARN), and the MNIST files' checksums (FAIL). Pure: two
    dicts in (``facts()`` shapes, any subset of keys), checks out.
    """
    level = _level(python_match)
    checks = []
    if "ray" in here and "ray" in head:
        same = here["ray"] == head["ray"]
        checks.append(Check("Ray version", OK if same else FAIL,
                            f"here {here['ray']}, head {head['ray']}",
                            f"install the head's Ray here: pip install 'ray[default,train]=={head['ray']}'"))
    if "python" in here and "python" in head:
        mine, theirs = here["python"].split("."), head["python"].split(".")
        full = mine == theirs
        minor = mine[:2] == theirs[:2]
        status = OK if full else (WARN if minor and level == "minor" else FAIL)
        checks.append(Check("Python version", status,
                            f"here {here['python']}, head {head['python']} (match level {level})",
                            f"use Python {head['python']} here (conda: python={head['python']})"
                            + ("" if not minor else f", or set {RAY_PYTHON_MATCH_ENV}=minor on every node and driver")))
    if "torch" in here and "torch" in head:
        same = _base(here["torch"]) == _base(head["torch"])
        checks.append(Check("torch version", OK if same else WARN,
                            f"here {here['torch']}, head {head['torch']}",
                            f"install torch=={_base(head['torch'])} here (models and tensors are pickled "
                            f"between nodes; another release may not load them)"))
    if "hetlab" in here and "hetlab" in head:
        checks.append(_compare_hetlab(here, head))
    if "mnist_sha256" in here and "mnist_sha256" in head:
        checks.append(_compare_mnist(here["mnist_sha256"], head["mnist_sha256"]))
    if "gloo" in here and "gloo" in head:
        checks.append(exchange_check(here["gloo"], head["gloo"]))
    return checks


def exchange_check(here: str, head: str) -> Check:
    """Which exchange Ray Train's ranks use between this machine and the head (notebook 07)."""
    if here != head:
        return Check("Ray Train exchange", OK, f"gloo speaks {here} here and {head} on the head, and the two "
                     f"never meet: Ray Train uses hetlab's exchange, through the rendezvous store (TCP "
                     f"{Ports.train_rendezvous} on the desktop)")
    return Check("Ray Train exchange", OK, f"gloo speaks {here} on both: Ray Train uses hetlab's exchange, "
                 f"through the rendezvous store (TCP {Ports.train_rendezvous} on the desktop); gloo would work too")


def _compare_hetlab(here: dict, head: dict) -> Check:
    """hetlab's version and commit, as ``connect`` compares them (``samecode.mismatch``)."""
    mine, theirs = here.get("hetlab_commit"), head.get("hetlab_commit")
    detail = (f"here {here['hetlab']}" + (f" ({mine})" if mine else "")
              + f", head {head['hetlab']}" + (f" ({theirs})" if theirs else ""))
    problem = mismatch("the head", {"hetlab": head["hetlab"], "commit": theirs},
                       {"this machine": {"hetlab": here["hetlab"], "commit": mine}})
    return Check("hetlab version", FAIL if problem else OK, detail, problem or "")


def _compare_mnist(mine: dict, theirs: dict) -> Check:
    from hetlab.core.data import SHA256
    names = sorted(set(mine) | set(theirs))
    differ = [n for n in names if mine.get(n) != theirs.get(n) or mine.get(n) is None]
    if not differ:
        return Check("MNIST files", OK, f"the same {len(names)} files here and on the head (sha256)")
    bad_here = [n for n in differ if mine.get(n) != SHA256.get(n)]
    bad_head = [n for n in differ if theirs.get(n) != SHA256.get(n)]
    where = " and ".join(w for w, bad in (("here", bad_here), ("on the head", bad_head)) if bad) or "somewhere"
    return Check("MNIST files", FAIL, f"{', '.join(differ)} differ between here and the head",
                 f"restore MNIST {where}: git checkout -- data/ in "
                 f"that machine's hetlab folder")


def macos_checks() -> list[Check]:
    """The Mac's traps: where the multi-node opt-in goes, and an explicit --node-ip-address.

    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` belongs on the Mac's ``ray start`` line (the
    one ``hetlab join`` prints): exported for every process, it moves even a local Ray off
    127.0.0.1. So here it is a warning when set in the shell, not when missing.
    """
    env = os.environ
    if platform.system() != "Darwin":
        return []
    exported = RAY_MAC_CLUSTER_ENV in env
    return [
        Check("macOS cluster opt-in", WARN if exported else OK,
              f"{RAY_MAC_CLUSTER_ENV}={env[RAY_MAC_CLUSTER_ENV]} for every process of this shell" if exported
              else f"{RAY_MAC_CLUSTER_ENV} is not exported; the `ray start` line from `hetlab join` sets it",
              f"unset {RAY_MAC_CLUSTER_ENV} (it moves even a local Ray off 127.0.0.1); keep it only on the "
              f"`ray start` line that `hetlab join` prints"),
        Check("node IP", WARN, "macOS host-name lookup often fails or gives the wrong address",
              f"pass --node-ip-address explicitly (`hetlab join --head HEAD_IP --ip MAC_IP` "
              f"prints it); LAN IPs here: {', '.join(sorted(joining.addresses_here())) or 'none found'}"),
    ]


def token_file_checks() -> list[Check]:
    """FAIL while a token file Ray would read (``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``)
    is open to group or others: anyone who can read it can run code on the cluster."""
    from hetlab.cluster.connecting import OPEN_BITS, token_files
    checks = []
    for path in token_files():
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            continue
        shown = str(path).replace(str(Path.home()), "~", 1) if path.is_relative_to(Path.home()) else str(path)
        exposed = bool(mode & OPEN_BITS)
        checks.append(Check("token file", FAIL if exposed else OK,
                            f"{shown} has mode {mode:04o}"
                            + (" (others on this machine can read the token)" if exposed else ""),
                            f"chmod 600 {shown}"))
    return checks


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
    still reports the GPU, so a worker would hold it and compute on the CPU); a Mac whose torch
    cannot use MPS WARNs. ``system`` is ``platform.system()``, or ``"WSL"`` inside WSL;
    ``torch_cuda`` is ``torch.version.cuda``."""
    if not usable and system in CUDA_FIX and nvidia_card:
        return Check("devices", FAIL, f"{found}: nvidia-smi sees an NVIDIA card, but this torch cannot use it "
                     f"(its CUDA: {torch_cuda or 'none, a CPU build'})", CUDA_FIX[system])
    if not usable and system == "Darwin" and arch == "arm64":
        return Check("devices", WARN, f"{found}: torch cannot use this Apple Silicon Mac's GPU (MPS)",
                     "macOS 12.3 or newer, and environment-mac.yml built by an arm64 conda")
    return Check("devices", OK, found)


def _nvidia_card() -> bool:
    """Does ``nvidia-smi`` list a card here (the driver sees one, whatever torch can do)?
    Inside WSL the Windows driver's nvidia-smi is in /usr/lib/wsl/lib."""
    smi = shutil.which("nvidia-smi", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/lib/wsl/lib"]))
    return smi is not None and wsl.output([smi, "-L"], timeout=10) is not None


def local_checks() -> list[Check]:
    """Versions and devices of this machine, its OS's traps (WSL, native Windows, a Mac's sleep),
    plus the macOS cluster traps when on a Mac."""
    import torch

    from hetlab.core import devices
    report = facts()
    system = "WSL" if wsl.in_wsl() else platform.system()
    card = _nvidia_card()
    checks = [Check("this machine", OK, f"{report['hostname']}, {report['os']}, {report['cpus']} CPUs, "
                                        f"{report['memory_gb']} GiB"),
              *oschecks.os_checks(platform.system(), card),
              Check("versions", OK, f"Python {report['python']}, Ray {report['ray']}, "
                                    f"torch {report['torch']}, hetlab {report['hetlab']}"
                                    + (f" ({report['hetlab_commit']})" if report['hetlab_commit'] else "")),
              python_check(report["python"]),
              Check("MNIST files", OK if report["mnist"] == "verified" else FAIL, report["mnist"],
                    "restore them: git checkout -- data/"),
              accelerator_check(f"{', '.join(devices.available())}; accelerator: {report['accelerator']}",
                                report["accelerator"] != "none", system, platform.machine(),
                                card, torch.version.cuda)]
    if os.environ.get(RAY_AUTH_ENV, "").lower() != "token":
        checks.append(Check("token auth", WARN, f"{RAY_AUTH_ENV} is not 'token' in this shell (hetlab's notebooks "
                            f"and commands turn it on for the pair; `ray` commands here do not)",
                            f"export {RAY_AUTH_ENV}=token before a `ray` command such as `ray status`, and keep "
                            "the head's token in ~/.ray/auth_token (chmod 600)"))
    return checks + token_file_checks() + macos_checks()


def head_versions(host: str, port: int) -> dict:
    """The Ray and Python versions the head was started with, read from its GCS (no driver needed)."""
    import json

    from ray._raylet import GcsClient
    gcs = GcsClient(address=f"{host}:{port}")
    meta = json.loads(gcs.internal_kv_get(b"CLUSTER_METADATA", namespace=b"cluster").decode())
    return {"ray": meta["ray_version"], "python": meta["python_version"]}


AFTER_CONNECT = ("torch version", "hetlab version", "MNIST files", "Ray Train exchange")


def head_checks(address: str, timeout: float = 10.0) -> list[Check]:
    """Reach the head, compare what it runs with here, then (as a driver) probe every node's ports.

    Ray and Python are read from the head's GCS before connecting (a mismatch would make
    the connection itself fail). torch, hetlab and the MNIST checksums exist only in
    processes on the head, so they are compared after connecting, from the tiny task that
    ``cluster.nodes()`` runs on each node.
    """
    from hetlab import cluster
    host, port, _ = parse_address(address)
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
        return checks + [Check("head answers", FAIL, problem, _fix_for(problem, host))]
    checks.append(Check("head answers", OK, "Ray's GCS answered and accepted this machine's token"))
    here = facts()
    checks += compare_versions(here, head_versions(host, port))
    if not all(c.ok for c in checks):
        return checks
    try:
        cluster.connect(f"{host}:{port}", timeout=timeout, same_code=False)  # compared below, as a check
    except HetlabError as exc:
        return checks + [Check("driver connection", WARN, str(exc),
                               "a notebook connects from a machine that is a node: run the `ray start` "
                               "command from `hetlab join` here first")]
    try:
        rows = cluster.nodes()
        head = next((r for r in rows if r.get("is_head")), rows[0])
        checks.append(Check("driver connection", OK, f"{len(rows)} node(s): "
                                                     + ", ".join(r["name"] for r in rows)))
        checks += [c for c in compare_versions(here, head) if c.name in AFTER_CONNECT]
        checks += port_checks(rows, timeout=min(3.0, timeout))
    finally:
        import ray
        ray.shutdown()
    return checks


def port_checks(rows: list[dict], timeout: float = 3.0) -> list[Check]:
    """From here, try each node's Ray ports (as the node reports them)."""
    checks = []
    for row in rows:
        closed = []
        for name, port in row.get("ports", {}).items():
            if port and port_open(row["ip"], int(port), timeout=timeout):
                closed.append(f"{name} {port}")
        checks.append(Check(f"ports of {row['name']}", FAIL if closed else OK,
                            f"{row['ip']}: " + (", ".join(closed) + " unreachable" if closed
                                                 else "all reachable from here"),
                            f"open those TCP ports on {row['name']}'s firewall for this machine's IP"))
    return checks


def _fix_for(message: str, host: str) -> str:
    if "token" in message:
        return (f"export {RAY_AUTH_ENV}=token and put the head's token (`ray get-auth-token` there) in "
                "~/.ray/auth_token here, chmod 600 (`hetlab join` prints how)")
    if "version" in message:
        return "install the head's exact Ray and Python versions here"
    return f"check `hetlab head --ip {shlex.quote(host)}` was run there and the port is the GCS port"


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


def doctor(head: str | None = None, timeout: float = 10.0) -> list[Check]:
    """All preflight checks: this machine, and with ``head`` the cluster (``hetlab doctor``). When this
    machine's saved address moved, the head is not tried: its firewall admits the old address only."""
    pair = pair_check(head)
    checks = pair + local_checks()
    if head and all(c.ok for c in pair):
        checks += head_checks(head, timeout=timeout)
    return checks


def render(checks: list[Check]) -> str:
    """Checks as text, one per line, with a verdict at the end."""
    failed = [c for c in checks if not c.ok]
    verdict = "all checks passed" if not failed else f"{len(failed)} check(s) failed: fix them top to bottom"
    return "\n".join([str(c) for c in checks] + [verdict])
