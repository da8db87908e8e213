"""The real pair, rehearsed on one Linux box: two hosts, a capped link, two firewalls (``hetlab rehearse``).

Each *host* is a network namespace with its own address on a private link (addresses
that exist only inside these namespaces: nothing leaves this machine), its own
hostname that resolves to 127.0.1.1 as on a default Ubuntu install, its own home
and Ray temp folder, and an nftables firewall that admits from the peer exactly the
ports that hetlab's printed instructions open and drops everything else. The link is
capped with ``tc tbf``; this kernel has no ``netem``, so **latency is not emulated**.

Ray is started in each host by running the very lines ``hetlab head`` / ``hetlab join``
print, with one honest difference: ``--num-gpus 1``, because Ray reports a GPU on both
real machines; torch in the rehearsal still sees only a CPU. The "mac" host is a Linux
namespace, not a Mac: it only borrows macOS's ephemeral port range, so that the Mac's
printed firewall rule is the one tested. Every label a learner sees says "rehearsal".

Everything is stopped by namespace and PID (``ip netns pids``), never by ``ray stop``,
which would stop every Ray on the machine. Needs root, ``ip``, ``tc``, ``nft``, ``unshare``.
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

from hetlab import commands
from hetlab.errors import HetlabError
from hetlab.reach import start_with_retry
from hetlab.vocab import ADDRESS_ENV, REHEARSAL_ENV  # REHEARSAL_ENV: set in every rehearsal process

ROOT = Path("/tmp/hlr")            # short: Ray's socket paths live under it (108-byte limit)
STATE = ROOT / "state.json"
TOOLS = ("ip", "tc", "nft", "unshare")


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
    def home(self) -> Path:
        return ROOT / self.role / "home"

    @property
    def ray_tmp(self) -> Path:
        return ROOT / self.role / "tmp"


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
        return (f"the rehearsal needs {', '.join(absent)}: install iproute2, nftables and util-linux "
                f"(e.g. apt-get install iproute2 nftables)")
    return None


def _run(argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise HetlabError(f"rehearsal: `{shlex.join(argv)[:120]}` failed: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done


def _in(host: Host, argv: list[str]) -> list[str]:
    """argv run inside ``host``: its network namespace and its own hostname (a UTS namespace).

    A joining node takes the head's Ray temp folder path from the head; on two real machines
    that path is on two disks. Here the mac host mounts its own folder over it (a mount
    namespace), so the two hosts' Ray logs and sockets stay apart as they would.
    """
    setup = 'hostname "$0"'
    if host is not DESKTOP:
        setup += f" && mount --bind {host.ray_tmp} {DESKTOP.ray_tmp}"
    return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--", "sh", "-c",
            f'{setup} && exec "$@"', host.hostname, *argv]


def host_env(host: Host, address: str | None = None) -> dict:
    """The environment of a process on ``host``: its home, its Ray temp folder, token auth,
    this Python's ``ray``/``hetlab`` on PATH; ``address`` adds ``HETLAB_ADDRESS`` (drivers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", ADDRESS_ENV))}
    env.update(HOME=str(host.home), RAY_TMPDIR=str(host.ray_tmp), RAY_USAGE_STATS_ENABLED="0",
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
               **{REHEARSAL_ENV: host.role}, **commands.AUTH_ENV)
    if address:
        env[ADDRESS_ENV] = address
    return env


def firewall(host: Host, peer: Host, ports: commands.Ports) -> str:
    """The nftables ruleset of ``host``: from ``peer`` only the printed ports; nothing else.

    The desktop's printed rule is ports (``firewall_ranges`` + Ray Train's ``train_ranges``).
    The Mac's is per application (python, raylet: macOS has no port rules); here that becomes
    the ports those programs listen on: Ray's pinned ports and macOS's ephemeral range.
    """
    head = host is DESKTOP
    allowed = commands.firewall_ranges(ports, head) + commands.train_ranges(ports, host.os, head)
    dports = ", ".join(allowed)
    return (f"table inet hetlab {{\n"
            f"  chain input {{\n"
            f"    type filter hook input priority 0; policy drop;\n"
            f"    iif \"lo\" accept\n"
            f"    ct state established,related accept\n"
            f"    ip saddr {peer.ip} tcp dport {{ {dports} }} accept\n"
            f"  }}\n"
            f"}}\n")


def _command_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _start_ray(host: Host, lines: list[str]) -> None:
    """Run the printed lines on ``host``. Ray gives its agents fixed start-up windows that a busy
    machine can miss: then clear the host (by namespace) and run the ``ray start`` line once more."""
    def start() -> None:
        script = "set -e\n" + "\n".join(lines)
        done = subprocess.run(_in(host, ["bash", "-c", script]), env=host_env(host), capture_output=True,
                              text=True, timeout=240, start_new_session=True)  # Ray outlives its caller
        if done.returncode != 0:
            raise RuntimeError(" ".join((done.stderr or done.stdout).split())[-300:])

    def clean_up(started: float) -> None:
        _kill_all(host.netns)
        lines[:] = [line for line in lines if "ray start" in line]   # the token is there already

    start_with_retry(start, clean_up, lambda exc, _: HetlabError(
        f"rehearsal: Ray did not start on the {host.role} host: {exc}"))


def up(profile: str = "wifi", ports: commands.Ports = commands.Ports()) -> dict:
    """Build both hosts, start Ray in each with the printed lines; returns the state (also saved)."""
    if profile not in PROFILES:
        raise HetlabError(f"link profile {profile!r}: use one of {', '.join(PROFILES)}.")
    why = missing()
    if why:
        raise HetlabError(why)
    down()  # a stale rehearsal (a crash, a killed test) goes first
    started = time.perf_counter()
    try:
        _network(profile, ports)
        for host in HOSTS:
            (host.home / ".ray").mkdir(parents=True, exist_ok=True)
            host.ray_tmp.mkdir(parents=True, exist_ok=True)
        head_text = commands.render_head(DESKTOP.ip, ports, gpus=1)
        _start_ray(DESKTOP, _command_lines(head_text))
        # The learner carries the token to the Mac by hand; here the rehearsal copies the file.
        token = DESKTOP.home / ".ray" / "auth_token"
        shutil.copy(token, MAC.home / ".ray" / "auth_token")
        os.chmod(MAC.home / ".ray" / "auth_token", 0o600)
        _start_ray(MAC, _join_lines(MAC, ports))
    except BaseException:
        down()
        raise
    state = {"address": f"{DESKTOP.ip}:{ports.gcs}", "profile": profile, "mbit": PROFILES[profile],
             "hosts": {h.role: {"ip": h.ip, "netns": h.netns, "hostname": h.hostname} for h in HOSTS},
             "up_s": round(time.perf_counter() - started, 1)}
    STATE.write_text(json.dumps(state))
    return state


def _network(profile: str, ports: commands.Ports) -> None:
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
        low, high = commands.EPHEMERAL_PORTS[host.os]  # the "mac" uses macOS's range
        _run(ns + ["sh", "-c", f"echo {low} {high} > /proc/sys/net/ipv4/ip_local_port_range"])
        _run(ns + ["nft", "-f", "-"], input=firewall(host, peer, ports))


def _tbf(verb: str, host: Host, mbit: int) -> list[str]:
    """``tc`` argv capping ``host``'s side of the link (its egress) at ``mbit`` Mbit/s."""
    return ["tc", "qdisc", verb, "dev", host.ifname, "root", "tbf", "rate", f"{mbit}mbit",
            "burst", f"{max(32, mbit // 4)}kb", "latency", "50ms"]


def set_link(profile: str) -> dict:
    """Change the running rehearsal's link cap (``wifi`` or ``gigabit``) in place."""
    state = status()
    if state is None:
        raise HetlabError("no rehearsal is up: run `sudo hetlab rehearse up` first.")
    if profile not in PROFILES:
        raise HetlabError(f"link profile {profile!r}: use one of {', '.join(PROFILES)}.")
    for host in HOSTS:
        _run(["ip", "netns", "exec", host.netns] + _tbf("change", host, PROFILES[profile]))
    state.update(profile=profile, mbit=PROFILES[profile])
    STATE.write_text(json.dumps(state))
    return state


def describe(state: dict) -> str:
    """What a learner needs to know about a running rehearsal, a few lines."""
    desktop, mac = state["hosts"]["desktop"], state["hosts"]["mac"]
    return "\n".join([
        f"rehearsal up ({state['up_s']:.0f} s): desktop {desktop['ip']} (head, netns {desktop['netns']}), "
        f"mac {mac['ip']} (netns {mac['netns']}; a Linux namespace playing the Mac)",
        f"link: {state['profile']}, capped at {state['mbit']} Mbit/s each way; no latency emulated "
        f"(this kernel has no netem)",
        "Ray reports GPU: 1 on both hosts (--num-gpus 1, as on the real pair); torch sees only a CPU",
        f"drivers run on the desktop with HETLAB_ADDRESS={state['address']}: "
        f"sudo hetlab rehearse run -- COMMAND, or JupyterLab there: sudo hetlab rehearse lab",
    ])


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
    _kill_all(*running)
    for netns in running:
        _run(["ip", "netns", "del", netns], check=False)
        gone.append(netns)
    for host in HOSTS:
        shutil.rmtree(Path("/etc/netns") / host.netns, ignore_errors=True)
    shutil.rmtree(ROOT, ignore_errors=True)
    return gone


def _kill_all(*netns: str) -> None:
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


def stop_host(role: str) -> None:
    """The machine goes away: every process on that rehearsal host stops (its Ray node too)."""
    _kill_all(_host(role).netns)


def rejoin(role: str = "mac", ports: commands.Ports = commands.Ports(), timeout: float = 60.0) -> None:
    """The machine is back: run its printed ``ray start --address`` line again (notebook 08).

    From a driver connected to the rehearsal, first wait until the head has counted the old
    node dead: a node started at the same address while the head still counts the old one
    alive may never join (a real Mac wakes up long after that). Then wait until the new node
    is alive, and start it once more if it is not within ``timeout`` seconds.
    """
    host = _host(role)
    if host is DESKTOP:
        raise HetlabError("the desktop is the head: stopping it ends the cluster; run `hetlab rehearse up`.")
    if not _node_at(host.ip, alive=False, timeout=timeout):
        raise HetlabError(f"rehearsal: the head still counts the {role} host's old node alive after "
                          f"{timeout:.0f} s; run `hetlab rehearse down` and `up`.")
    for _ in range(2):
        _start_ray(host, _join_lines(host, ports))
        if _node_at(host.ip, alive=True, timeout=timeout):
            return
        _kill_all(host.netns)
    raise HetlabError(f"rehearsal: the {role} host's Ray started twice but never joined within "
                      f"{timeout:.0f} s; run `hetlab rehearse down` and `up`.")


def _node_at(ip: str, alive: bool, timeout: float) -> bool:
    """Wait until a live node at ``ip`` exists (``alive``) or none does; True when it happened.
    True at once when this process is not connected to Ray: there is nobody to ask."""
    import ray

    deadline = time.time() + timeout
    while ray.is_initialized():
        here = any(n.get("Alive") and n.get("NodeManagerAddress") == ip for n in ray.nodes())
        if here == alive:
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.5)
    return True


def _join_lines(host: Host, ports: commands.Ports) -> list[str]:
    """The printed ``ray start --address`` line for ``host`` (+ --num-gpus 1); the token is copied apart."""
    text = commands.render_join(DESKTOP.ip, host.ip, ports, gpus=1)
    return [line for line in _command_lines(text) if "ray start" in line]


def _host(role: str) -> Host:
    host = {h.role: h for h in HOSTS}.get(role)
    if host is None:
        raise HetlabError(f"no rehearsal host {role!r}: use desktop or mac.")
    return host


def lab(port: int = 8888, folder: str = "notebooks") -> int:
    """JupyterLab on the rehearsal desktop, opened from this machine's browser.

    The server and its kernels run in the desktop host (drivers there, ``HETLAB_ADDRESS``
    set, as on the real desktop) and listen on a Unix socket; this process forwards
    ``127.0.0.1:port`` here to it (network namespaces do not separate Unix sockets). Ctrl-C stops both.
    """
    import asyncio
    import secrets

    state = status()
    if state is None:
        raise HetlabError("no rehearsal is up: run `sudo hetlab rehearse up` first.")
    token, sock = secrets.token_hex(16), ROOT / "jupyter.sock"
    jupyter = str(Path(sys.executable).parent / "jupyter")
    server = subprocess.Popen(_in(DESKTOP, [jupyter, "lab", "--no-browser", "--allow-root", f"--ServerApp.sock={sock}",
                                            f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}"]),
                              env=host_env(DESKTOP, state["address"]))
    print(f"JupyterLab on the rehearsal desktop: http://127.0.0.1:{port}/lab?token={token}  (Ctrl-C stops it)")
    try:
        asyncio.run(_forward(port, sock))
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


async def _forward(port: int, sock: Path) -> None:
    """Forward TCP connections on 127.0.0.1:port to the Unix socket ``sock``, both ways."""
    import asyncio

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(client_reader, client_writer):
        try:
            reader, writer = await asyncio.open_unix_connection(str(sock))
        except OSError:  # the server is still starting
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def run_on(role: str, argv: list[str], driver: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` on the rehearsal's ``role`` host; a driver gets ``HETLAB_ADDRESS`` like the learner."""
    host = _host(role)
    state = status()
    if state is None:
        raise HetlabError("no rehearsal is up: run `sudo hetlab rehearse up` first.")
    env = {**host_env(host, state["address"] if driver else None), **kw.pop("env", {})}
    return subprocess.run(_in(host, argv), env=env, **kw)
