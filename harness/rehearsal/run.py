"""The real pair, rehearsed on one Linux box: two hosts, a capped link, two firewalls (``python -m harness.rehearsal``).

Each host is a network namespace (``harness.rehearsal.hosts``). Ray starts on them only through the learner's own steps
(``harness.rehearsal.learner``): the lines ``hetlab head`` and ``hetlab join`` print, pasted whole into each host's shell,
the desktop's firewall (real ufw) among them. This module runs Ray on them, and commands and JupyterLab
in them. Every label says "rehearsal": each host's origin label (``Host.origin``, ``HETLAB_ORIGIN``),
which hetlab carries into what a learner sees. Stopped by namespace and PID, never ``ray stop``. Needs root,
ip, tc, nft, ufw, zsh and unshare.
"""
from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

from hetlab.cluster import commands
from hetlab.store import saved_pair
from hetlab.cluster.connecting import start_with_retry
from hetlab.errors import HetlabError
from harness.rehearsal import learner
from harness.rehearsal.hosts import (DESKTOP, HOSTS, MAC, PROFILES, ROOT, STATE, Host, inside, kill_all_in,
                                          set_up_network, down, host_env, missing, status)
from harness.rehearsal.hosts import firewall, set_link  # noqa: F401 - rehearsal.set_link, .firewall


def start_pair(ports: commands.Ports = commands.Ports()) -> list[dict]:
    """The learner's day one on the two hosts, without the notebook: the desktop's printed lines, then
    the Mac's (``hetlab head --mac-ip``, ``hetlab join --head-user``), then the pair saved on both, as
    notebook 04 saves it. Returns what each paste ran (``learner.paste``)."""
    pasted = [paste_with_retry(DESKTOP, commands.render_head(DESKTOP.ip, ports, mac_ip=MAC.ip)),
              paste_with_retry(MAC, commands.render_join(DESKTOP.ip, MAC.ip, ports, head_user=getpass.getuser()))]
    for host in HOSTS:
        saved_pair.save(DESKTOP.ip, MAC.ip, ports.gcs, where=host.measured)
    return pasted


def paste_with_retry(host: Host, text: str) -> dict:
    """``learner.paste``, once more when Ray says a node "timed out during startup" (its fixed start-up
    windows, which a busy machine can miss: ``connecting.start_with_retry``). What the failed paste started on
    that host is stopped first (by PID); the lines before ``ray start`` (token, firewall) do the same again."""
    return start_with_retry(lambda: learner.paste(host, text), lambda started: learner.kill_since(host, started),
                            lambda exc, _: None)


# A host: its own address on a private link (nothing leaves this machine), a hostname resolving to
# 127.0.1.1 as on a default Ubuntu, its own home and Ray temp folder, and an nftables firewall that
# admits from the peer exactly the ports hetlab's printed instructions open. The link is capped with
# tc tbf; this kernel has no netem, so **latency is not emulated**. One honest difference from the
# printed lines: --num-gpus 1 (Ray reports a GPU on both real machines; torch here sees a CPU). The
# "mac" host is Linux: it borrows macOS's ephemeral port range, and has no gloo of Linux's (as a Mac).
def up(profile: str = "wifi", ports: commands.Ports = commands.Ports(), start: bool = True) -> dict:
    """Build both hosts and, with ``start``, bring the pair up by the learner's printed lines
    (``start_pair``); without, the two machines wait for notebook 04. Returns the state (also saved)."""
    if profile not in PROFILES:
        raise HetlabError(f"link profile {profile!r}: use one of {', '.join(PROFILES)}.")
    why = missing()
    if why:
        raise HetlabError(why)
    down()  # a stale rehearsal (a crash, a killed test) goes first
    began = time.perf_counter()
    try:
        set_up_network(profile, ports)
        for host in HOSTS:
            (host.home / ".ray").mkdir(parents=True, exist_ok=True)
            host.ray_tmp.mkdir(parents=True, exist_ok=True)
        learner.make_standins()
        pasted = start_pair(ports) if start else []
    except BaseException:
        down()
        raise
    state = {"address": f"{DESKTOP.ip}:{ports.gcs}", "profile": profile, "mbit": PROFILES[profile],
             "hosts": {h.role: {"ip": h.ip, "netns": h.netns, "hostname": h.hostname} for h in HOSTS},
             "up_s": round(time.perf_counter() - began, 1), "ray": bool(start),
             "pasted": [{k: v for k, v in p.items() if k != "output"} for p in pasted]}
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
        "Ray reports GPU: 1 on both hosts (a stand-in, as on the real pair); torch sees only a CPU",
        ("Ray started by the printed lines, the pair saved on both hosts" if state.get("ray") else
         "no Ray yet: run notebook 04 on the desktop (sudo python -m harness.rehearsal lab) and paste its lines"),
        "drivers run on the desktop: sudo python -m harness.rehearsal run -- COMMAND, or JupyterLab there: "
        "sudo python -m harness.rehearsal lab",
    ])


def stop_host(role: str) -> None:
    """The machine goes away: every process on that rehearsal host stops (its Ray node too)."""
    kill_all_in(_host(role).netns)


def rejoin(role: str = "mac", ports: commands.Ports = commands.Ports(), timeout: float = 60.0) -> None:
    """The machine is back: run its day-two line, ``hetlab join --start``, again (notebook 08).

    From a driver connected to the rehearsal, first wait until the head has counted the old
    node dead: a node started at the same address while the head still counts the old one
    alive may never join (a real Mac wakes up long after that). Then wait until the new node
    is alive, and start it once more if it is not within ``timeout`` seconds.
    """
    host = _host(role)
    if host is DESKTOP:
        raise HetlabError("the desktop is the head: stopping it ends the cluster; run `python -m harness.rehearsal up`.")
    if not _node_at(host.ip, alive=False, timeout=timeout):
        raise HetlabError(f"rehearsal: the head still counts the {role} host's old node alive after "
                          f"{timeout:.0f} s; run `python -m harness.rehearsal down` and `up`.")
    for _ in range(2):
        started = time.time()
        learner.paste(host, "hetlab join --start")
        if _node_at(host.ip, alive=True, timeout=timeout):
            return
        learner.kill_since(host, started)
    raise HetlabError(f"rehearsal: the {role} host's Ray started twice but never joined within "
                      f"{timeout:.0f} s; run `python -m harness.rehearsal down` and `up`.")


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


def _host(role: str) -> Host:
    host = {h.role: h for h in HOSTS}.get(role)
    if host is None:
        raise HetlabError(f"no rehearsal host {role!r}: use desktop or mac.")
    return host


def lab(port: int = 8888, folder: str = ".") -> int:
    """JupyterLab on the rehearsal desktop, opened from this machine's browser. It serves the
    checkout, as ``make lab`` does, so that the notebooks' links to docs/ open in it.

    The server and its kernels run in the desktop host (drivers there, ``HETLAB_ADDRESS``
    set, as on the real desktop) and listen on a Unix socket; this process forwards
    ``127.0.0.1:port`` here to it (network namespaces do not separate Unix sockets). Ctrl-C stops both.
    """
    import asyncio
    import secrets

    state = status()
    if state is None:
        raise HetlabError("no rehearsal is up: run `sudo python -m harness.rehearsal up` first.")
    token, sock = secrets.token_hex(16), ROOT / "jupyter.sock"
    jupyter = str(Path(sys.executable).parent / "jupyter")
    server = subprocess.Popen(inside(DESKTOP, [jupyter, "lab", "--no-browser", "--allow-root", f"--ServerApp.sock={sock}",
                                            f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}"]),
                              env=learner.learner_env(DESKTOP))
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
        raise HetlabError("no rehearsal is up: run `sudo python -m harness.rehearsal up` first.")
    env = {**host_env(host, state["address"] if driver else None), **kw.pop("env", {})}
    return subprocess.run(inside(host, argv), env=env, **kw)
