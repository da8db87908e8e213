"""The pair's addresses: the Mac joins the desktop from notebook 04.

``wait_for_mac`` waits for the head and then the Mac's node, and when the Mac does not come says in
one line what stopped it. ``remember`` saves the pair on both machines (``saved_pair``). An address
that moved overnight: notebook 04 again, with the new address, prints new lines and saves the pair.
"""
from __future__ import annotations

import shlex
import socket
import time

import psutil
import ray

from hetlab.store import saved_pair
from hetlab.cluster.commands import check_ip, gcs_address
from hetlab.cluster.connecting import check_same_code, connect
from hetlab.cluster.roles import live_nodes, placement
from hetlab.cluster.connecting import port_open
from hetlab.errors import HetlabError
from hetlab.vocab import Ports


def mac_address(text: str) -> str:
    """The Mac's address as typed in notebook 04, checked: one line on a typo, a host name or a loopback."""
    ip = check_ip(text, "the Mac's address")
    if ip.startswith("127.") or ip == "::1":
        raise HetlabError(f"the Mac's address {ip} is this machine's loopback: give the Mac's LAN address "
                          f"(on the Mac: System Settings > Network > your connection > Details).")
    return ip


def lan_address_toward(peer_ip: str) -> str:
    """This machine's own address on the way to ``peer_ip``: the kernel picks the route when a UDP
    socket is connected, and nothing is sent."""
    family = socket.AF_INET6 if ":" in peer_ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((peer_ip, 9))
        return probe.getsockname()[0]


def addresses_here() -> set[str]:
    """Every address this machine's interfaces hold now, loopback aside (psutil; nothing is sent)."""
    found = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family in (socket.AF_INET, socket.AF_INET6)}
    return {ip for ip in found if not (ip.startswith("127.") or ip == "::1")}


def role_here(pair: saved_pair.SavedPair, here: set[str]) -> str | None:
    """Which machine of ``pair`` this is, by the addresses it holds (None: neither saved address)."""
    return "desktop" if pair.desktop_ip in here else "mac" if pair.mac_ip in here else None


def wait_for_mac(desktop_ip: str, mac_ip: str, ports: Ports = Ports(), timeout: float = 600.0) -> float:
    """Wait until the head runs here and the Mac's node has joined it, printing progress every 15 s;
    returns the seconds waited. After ``timeout`` seconds, one HetlabError naming what stopped it."""
    started, said, last = time.perf_counter(), 0.0, ""
    address = f"{desktop_ip}:{ports.gcs}"
    while True:
        waited = time.perf_counter() - started
        if not ray.is_initialized() and port_open(desktop_ip, ports.gcs, timeout=2) is None:
            try:
                connect(address, timeout=30)
            except HetlabError as exc:  # a head still starting: try again until the time is up
                last = str(exc)
        if ray.is_initialized() and any(n["NodeManagerAddress"] == mac_ip for n in live_nodes("mac")):
            check_same_code()  # a Mac on another commit would run another program: one line, now
            print(f"the Mac ({mac_ip}) joined after {waited:.0f} s", flush=True)
            return waited
        if waited > timeout:
            raise HetlabError(why_no_mac(desktop_ip, mac_ip, ports, waited, last))
        if waited >= said + 15:
            said = waited
            print(f"waiting for {'the Mac' if ray.is_initialized() else 'the head (step 3 on this desktop)'}… "
                  f"{waited:.0f} s of {timeout:.0f}", flush=True)
        time.sleep(1)


def why_no_mac(desktop_ip: str, mac_ip: str, ports: Ports, waited: float, last: str = "") -> str:
    """One line: why the Mac's node is not in the cluster, read from the desktop's side."""
    where = f"after {waited:.0f} s"
    if not ray.is_initialized():
        return (f"{where} no head answers at {desktop_ip}:{ports.gcs}{f' ({last})' if last else ''}: run this "
                f"desktop's lines (above) in a terminal here; `hetlab doctor` says what is missing.")
    problem = port_open(mac_ip, ports.node_manager, timeout=3) or ""
    if "timed out" in problem:
        return (f"{where} the desktop cannot reach the Mac ({mac_ip}:{ports.node_manager} {problem}): the Mac's "
                f"firewall drops it, or the address is not the Mac's: allow python and raylet (the Mac's step "
                f"2), and check MAC_IP.")
    return (f"{where} the Mac's node has not joined this head: its block failed; read what it printed there (the "
            f"token, the Ray or Python version, commit, the firewall of this desktop), or run `hetlab doctor "
            f"--head {shlex.quote(gcs_address(desktop_ip, ports.gcs))}` on the Mac.")


def remember(desktop_ip: str, mac_ip: str, port: int = Ports.gcs) -> tuple[str, str]:
    """Save the pair here and, by a task pinned to the Mac's node, on the Mac; returns both paths."""
    here = saved_pair.save(desktop_ip, mac_ip, port)
    there = ray.get(ray.remote(num_cpus=0)(saved_pair.save).options(**placement("mac"))
                    .remote(desktop_ip, mac_ip, port), timeout=60)
    return str(here), str(there)
