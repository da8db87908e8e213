"""The rehearsal's two hosts on one Linux box (harness.rehearsal.run, ``python -m harness.rehearsal``): the machines, without Ray.

Each host is a network namespace with its own address on a private link, hostname, home, figures and
Ray temp folders. The desktop's firewall is real ufw (private copies of its files), built only by the
lines the learner pastes; the "mac" stands in for macOS's per-application firewall with nftables. The
link is capped with ``tc tbf`` (no ``netem``: no latency). Also: running a command in a host, a host
re-addressed (day two), the state, and the teardown by namespace and PID.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hetlab.cluster import commands
from hetlab.errors import HetlabError
from hetlab.vocab import ADDRESS_ENV, MAC_GLOO_STANDIN, MEASURED_ENV, ORIGIN_ENV

EPHEMERAL_PORTS = {"linux": (32768, 60999), "macos": (49152, 65535)}  # each OS's default range

REPO = Path(__file__).resolve().parents[2]   # the checkout: on each host's PYTHONPATH, so its processes import harness
ROOT = Path("/tmp/hlr")            # short: Ray's socket paths live under it (108-byte limit)
UFW = ROOT / "desktop" / "ufw"     # the desktop host's private copies of ufw's files
UFW_DIRS = ("/etc/ufw", "/lib/ufw")
# Ray reports GPU: 1 on both real machines (the card; the Mac's GPU); torch here sees a CPU. The
# stand-in for that detection: Ray's own resource override, in each host's environment.
GPU_STANDIN = {"RAY_OVERRIDE_RESOURCES": '{"GPU": 1}'}
STATE = ROOT / "state.json"
TOOLS = ("ip", "tc", "nft", "unshare", "ufw", "zsh")


@dataclass(frozen=True)
class Host:
    """One rehearsal machine: its namespace, interface, address and hostname."""

    role: str
    ip: str
    os: str  # whose ephemeral port range (and printed firewall rule) it plays

    @property
    def netns(self) -> str:
        return f"hetlab-{self.role}"

    @property
    def ifname(self) -> str:
        return f"hl-{self.role}"

    @property
    def hostname(self) -> str:
        return f"{self.role}-rehearsal"

    @property
    def origin(self) -> str:
        """The plain label every figure and line this host makes carries (``HETLAB_ORIGIN``): not your pair."""
        plays = "the Mac" if self.os == "macos" else "the desktop"
        return f"rehearsal, a Linux network namespace playing {plays}"

    @property
    def home(self) -> Path:
        return ROOT / self.role / "home"

    @property
    def ray_tmp(self) -> Path:
        return ROOT / self.role / "tmp"

    @property
    def measured(self) -> Path:
        """The host's own figures folder (``measured/`` on a real machine), where its saved pair lives too."""
        return self.home / "measured"


DESKTOP = Host("desktop", "10.77.0.1", "linux")
MAC = Host("mac", "10.77.0.2", "macos")
HOSTS = (DESKTOP, MAC)
PROFILES = {"wifi": 200, "gigabit": 1000}  # Mbit/s of the tbf cap, each direction


def missing() -> str | None:
    """Why the rehearsal cannot run on this machine (one line), or None if it can."""
    if sys.platform != "linux":
        return "the rehearsal needs Linux network namespaces (run it on the Linux desktop)"
    if os.geteuid() != 0:
        return "the rehearsal needs root (network namespaces, tc, nftables): run it with sudo"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return (f"the rehearsal needs {', '.join(absent)}: install iproute2, nftables, util-linux, ufw and zsh "
                f"(e.g. apt-get install iproute2 nftables ufw zsh)")
    return None


def _run(argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise HetlabError(f"rehearsal: `{shlex.join(argv)[:120]}` failed: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done


def inside(host: Host, argv: list[str]) -> list[str]:
    """argv run inside ``host``: its network namespace and its own hostname (a UTS namespace).

    A joining node takes the head's Ray temp folder path from the head; on two real machines
    that path is on two disks. Here the mac host mounts its own folder over it (a mount
    namespace), so the two hosts' Ray logs and sockets stay apart as they would.
    """
    setup = 'hostname "$0"'
    if host is not DESKTOP:
        setup += f" && mount --bind {host.ray_tmp} {DESKTOP.ray_tmp}"
    else:  # ufw's files, private to this host: its rules change this namespace only
        setup += "".join(f" && mount --bind {_private(d)} {d}" for d in UFW_DIRS)
    return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--", "sh", "-c",
            f'{setup} && exec "$@"', host.hostname, *argv]


def host_env(host: Host, address: str | None = None) -> dict:
    """The environment of a process on ``host``: its home, figures folder and Ray temp folder, this
    Python's ``ray``/``hetlab`` on PATH (the course's environment, activated), the checkout on PYTHONPATH
    (``harness`` is not installed), its origin label (``HETLAB_ORIGIN``), the GPU stand-in, and on
    the "mac" no gloo of Linux's (``MAC_GLOO_STANDIN``: gloo fails there at once, as a Mac's never meets Linux's);
    ``address`` adds ``HETLAB_ADDRESS`` (a driver told where the pair is, instead of the saved pair)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", ADDRESS_ENV, MEASURED_ENV))}
    env.update(HOME=str(host.home), RAY_TMPDIR=str(host.ray_tmp), RAY_USAGE_STATS_ENABLED="0",
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
               **{ORIGIN_ENV: host.origin, MEASURED_ENV: str(host.measured)}, **GPU_STANDIN,
               **(MAC_GLOO_STANDIN if host.os == "macos" else {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if address:
        env[ADDRESS_ENV] = address
    return env


def firewall(host: Host, peer: Host, ports: commands.Ports) -> str:
    """The nftables ruleset standing in for the Mac's firewall: from ``peer`` only the ports its
    allowed programs listen on; nothing else.

    The Mac's printed rule is per application (python, raylet: macOS has no port rules); here that
    becomes the ports those programs listen on: Ray's pinned ports. (The desktop's firewall is the real
    ufw of its printed lines, not this.)
    """
    head = host is DESKTOP
    allowed = commands.firewall_ranges(ports, head) + commands.train_ranges(ports, host.role)
    dports = ", ".join(allowed)
    return (f"table inet hetlab {{\n"
            f"  chain input {{\n"
            f"    type filter hook input priority 0; policy drop;\n"
            f"    iif \"lo\" accept\n"
            f"    ct state established,related accept\n"
            f"    ip saddr {peer.ip} tcp dport {{ {dports} }} accept\n"
            f"  }}\n"
            f"}}\n")


def set_up_network(profile: str, ports: commands.Ports) -> None:
    for host in HOSTS:
        _run(["ip", "netns", "add", host.netns])
        hosts_dir = Path("/etc/netns") / host.netns
        hosts_dir.mkdir(parents=True, exist_ok=True)
        (hosts_dir / "hosts").write_text(  # as on a default Ubuntu install: hostname → 127.0.1.1
            f"127.0.0.1\tlocalhost\n127.0.1.1\t{host.hostname}\n"
            f"::1\tlocalhost ip6-localhost ip6-loopback\n")
    _run(["ip", "link", "add", DESKTOP.ifname, "netns", DESKTOP.netns, "type", "veth",
          "peer", "name", MAC.ifname, "netns", MAC.netns])
    for host, peer in ((DESKTOP, MAC), (MAC, DESKTOP)):
        ns = ["ip", "netns", "exec", host.netns]
        _run(ns + ["ip", "addr", "add", f"{host.ip}/24", "dev", host.ifname])
        _run(ns + ["ip", "link", "set", "lo", "up"])
        _run(ns + ["ip", "link", "set", host.ifname, "up"])
        _run(ns + _tbf("add", host, PROFILES[profile]))
        low, high = EPHEMERAL_PORTS[host.os]  # the "mac" uses macOS's range
        _run(ns + ["sh", "-c", f"echo {low} {high} > /proc/sys/net/ipv4/ip_local_port_range"])
        if host is not DESKTOP:  # the desktop's comes from the lines the learner pastes (ufw)
            _run(ns + ["nft", "-f", "-"], input=firewall(host, peer, ports))
    for folder in UFW_DIRS:  # ufw as installed, untouched: each rehearsal starts from its defaults
        shutil.copytree(folder, _private(folder), symlinks=True)


def _private(folder: str) -> Path:
    """The desktop host's own copy of one of ufw's folders (``/etc/ufw`` → ``…/ufw/etc-ufw``)."""
    return UFW / folder.strip("/").replace("/", "-")


def _tbf(verb: str, host: Host, mbit: int) -> list[str]:
    """``tc`` argv capping ``host``'s side of the link (its egress) at ``mbit`` Mbit/s."""
    return ["tc", "qdisc", verb, "dev", host.ifname, "root", "tbf", "rate", f"{mbit}mbit",
            "burst", f"{max(32, mbit // 4)}kb", "latency", "50ms"]


def set_link(profile: str) -> dict:
    """Change the running rehearsal's link cap (``wifi`` or ``gigabit``) in place."""
    state = status()
    if state is None:
        raise HetlabError("no rehearsal is up: run `sudo python -m harness.rehearsal up` first.")
    if profile not in PROFILES:
        raise HetlabError(f"link profile {profile!r}: use one of {', '.join(PROFILES)}.")
    for host in HOSTS:
        _run(["ip", "netns", "exec", host.netns] + _tbf("change", host, PROFILES[profile]))
    state.update(profile=profile, mbit=PROFILES[profile])
    STATE.write_text(json.dumps(state))
    return state


def status() -> dict | None:
    """The running rehearsal's state (address, hosts, link), or None when none is up."""
    present = set(_run(["ip", "netns", "list"], check=False).stdout.split()) if shutil.which("ip") else set()
    if not STATE.exists() or not all(h.netns in present for h in HOSTS):
        return None
    return json.loads(STATE.read_text())


def down() -> list[str]:
    """Stop every process of both hosts by PID, delete the namespaces and files; returns what went."""
    gone = []
    if shutil.which("ip") is None:
        return gone
    present = set(_run(["ip", "netns", "list"], check=False).stdout.split())
    running = [host.netns for host in HOSTS if host.netns in present]
    kill_all_in(*running)
    for netns in running:
        _run(["ip", "netns", "del", netns], check=False)
        gone.append(netns)
    for host in HOSTS:
        shutil.rmtree(Path("/etc/netns") / host.netns, ignore_errors=True)
    shutil.rmtree(ROOT, ignore_errors=True)
    return gone


def kill_all_in(*netns: str) -> None:
    """SIGTERM every process in these namespaces, SIGKILL what is left after a second.

    Ray's raylet and GCS take over 5 s to act on SIGTERM; a rehearsal host has nothing to save
    (and a machine that goes away does not wait either), so the second signal comes soon.
    """
    def pids() -> list[int]:
        return [int(p) for ns in netns for p in _run(["ip", "netns", "pids", ns], check=False).stdout.split()]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + (1.0 if sig == signal.SIGTERM else 10.0)
        while time.time() < deadline and pids():
            time.sleep(0.1)

