"""The pair's addresses: the Mac joins the desktop from notebook 04, and a moved address on day two.

``lan_address_toward(mac_ip)`` finds the desktop's own address on the Mac's network (no packet is
sent). ``wait_for_mac`` waits, with progress and a time limit, for the head and then the Mac's node,
and when the Mac does not come says in one line what stopped it: the head not started, the Mac's
firewall, or a join that failed on the Mac (token, versions, commit: its own lines printed why).
``remember`` saves the pair on both machines (``saved_pair``), the Mac's copy over the cluster.

Day two (``hetlab head/join --start``, ``hetlab doctor``, ``hetlab pair``; README, "Day two"): a Mac's
Wi-Fi address can change overnight. ``check`` compares the saved pair with this machine's own
addresses (read from its interfaces, nothing is sent) and says in one line the old address, the new one
and the way on: ``hetlab pair --mac-ip NEW`` on both machines (``update``), which saves the new address
and, on the desktop, prints the firewall lines that admit it and delete the old address's rules.
"""
from __future__ import annotations

import shlex
import socket
import time

import psutil
import ray

from hetlab.store import saved_pair
from hetlab.cluster.commands import check_ip, firewall_ranges, gcs_address, train_ranges, ufw_ports
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


FLAG = {"desktop": "--desktop-ip", "mac": "--mac-ip"}
THEN = {"desktop": "`hetlab head --start` here, then `hetlab join --start` on the Mac",
        "mac": "`hetlab join --start` here"}


def addresses_here() -> set[str]:
    """Every address this machine's interfaces hold now, loopback aside (psutil; nothing is sent)."""
    found = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family in (socket.AF_INET, socket.AF_INET6)}
    return {ip for ip in found if not (ip.startswith("127.") or ip == "::1")}


def role_here(pair: saved_pair.SavedPair, here: set[str]) -> str | None:
    """Which machine of ``pair`` this is, by the addresses it holds (None: neither saved address)."""
    return "desktop" if pair.desktop_ip in here else "mac" if pair.mac_ip in here else None


def check(pair: saved_pair.SavedPair | None, role: str, here: set[str] | None = None) -> str | None:
    """None while this machine (the pair's ``role``) still holds its saved address; else one line naming
    the saved address, the one it has now, and the way on."""
    if pair is None:
        return None
    here = addresses_here() if here is None else here
    old, peer = (pair.desktop_ip, pair.mac_ip) if role == "desktop" else (pair.mac_ip, pair.desktop_ip)
    if old in here or role_here(pair, here) not in (None, role):
        return None
    try:
        new = lan_address_toward(peer)
    except OSError:  # no route: the network is down
        new = None
    new = new if new in here else (sorted(here) or ["none"])[0]
    machine = "desktop" if role == "desktop" else "Mac"
    where = ("" if role == "desktop" else " (on the desktop it prints the firewall lines for the new address: "
                                           "paste them there)")
    return (f"this {machine}'s address changed since notebook 04 saved the pair: it was {old}, it is {new} now. "
            f"Way on: `hetlab pair {FLAG[role]} {new}` on both machines{where}, then {THEN[role]}.")


def ufw_swap(old_mac: str, new_mac: str, ports: Ports = Ports()) -> list[str]:
    """The Linux desktop's ufw lines for a Mac that moved: its rules for the new address, then the
    ``ufw delete`` of each rule that named the old one (``commands.ufw_steps`` made them)."""
    rules = ufw_ports(firewall_ranges(ports, head=True) + train_ranges(ports, "desktop"))
    return ([f"sudo ufw allow proto tcp from {new_mac} to any port {rng}" for rng in rules]
            + [f"sudo ufw delete allow proto tcp from {old_mac} to any port {rng}" for rng in rules])


def update(pair: saved_pair.SavedPair | None, desktop_ip: str | None = None, mac_ip: str | None = None,
           here: set[str] | None = None, windows: bool = False) -> tuple[list[str], list[str]]:
    """``hetlab pair --mac-ip/--desktop-ip``: save the pair with the new address here; returns (notes, the
    block to paste): on a Linux desktop whose Mac moved, the ufw lines (``ufw_swap``)."""
    if pair is None and not (desktop_ip and mac_ip):
        raise HetlabError("no pair saved here yet (notebook 04 saves it once the Mac has joined): give both "
                          "--desktop-ip and --mac-ip, or run notebook 04.")
    desktop_ip = check_ip(desktop_ip, "the desktop's address") if desktop_ip else pair.desktop_ip
    mac_ip = check_ip(mac_ip, "the Mac's address") if mac_ip else pair.mac_ip
    port = pair.port if pair else Ports.gcs
    path = saved_pair.save(desktop_ip, mac_ip, port)
    new = saved_pair.SavedPair(desktop_ip, mac_ip, port)
    notes, block = [f"saved {new} in {path}"], []
    here = addresses_here() if here is None else here
    role = role_here(new, here)
    old_mac = pair.mac_ip if pair else None
    if role == "desktop" and old_mac and old_mac != mac_ip:
        if windows:
            notes.append(f"the Windows firewall admits the Mac's old address {old_mac}: run `hetlab head` and "
                         f"paste its PowerShell firewall lines (part B) as Administrator: they replace the rules")
        else:
            notes.append(f"the firewall admits the Mac's old address {old_mac}: paste the lines below here (sudo "
                         f"asks your password): they admit {mac_ip} and delete the rules for {old_mac}")
            block = ufw_swap(old_mac, mac_ip, Ports(gcs=port))
    elif role == "mac":
        notes.append(f"on the desktop too: `hetlab pair --mac-ip {mac_ip}`; then `hetlab join --start` here")
    elif role is None:
        notes.append(f"neither {desktop_ip} nor {mac_ip} is this machine's address now "
                     f"({', '.join(sorted(here)) or 'none'}): check the one you gave")
    return notes, block


def wait_for_mac(desktop_ip: str, mac_ip: str, ports: Ports = Ports(), timeout: float = 600.0,
                 every: float = 15.0, poll: float = 1.0) -> float:
    """Wait until the head runs here and the Mac's node has joined it; returns the seconds waited.

    Prints a line every ``every`` seconds. After ``timeout`` seconds without the Mac, one HetlabError
    that names what stopped it (``why_no_mac``). (``every``, ``poll``: tests/test_cluster.py waits the
    real way for a second, not minutes.)
    """
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
        if waited >= said + every:
            said = waited
            print(f"waiting for {'the Mac' if ray.is_initialized() else 'the head (step 3 on this desktop)'}… "
                  f"{waited:.0f} s of {timeout:.0f}", flush=True)
        time.sleep(poll)


def why_no_mac(desktop_ip: str, mac_ip: str, ports: Ports, waited: float, last: str = "") -> str:
    """One line: why the Mac's node is not in the cluster, read from the desktop's side."""
    where = f"after {waited:.0f} s"
    if not ray.is_initialized():
        return (f"{where} no head answers at {desktop_ip}:{ports.gcs}{f' ({last})' if last else ''}: run this "
                f"desktop's lines (above) in a terminal here; `hetlab doctor` says what is missing.")
    problem = port_open(mac_ip, ports.node_manager, timeout=3)
    if problem is None:
        return (f"{where} Ray runs on the Mac ({mac_ip}:{ports.node_manager} answers) but its node has not "
                f"joined this head: on the Mac, run `hetlab doctor --head {shlex.quote(gcs_address(desktop_ip, ports.gcs))}` (token, "
                f"versions, commit) and its last step again.")
    if "timed out" in problem:
        return (f"{where} the desktop cannot reach the Mac ({mac_ip}:{ports.node_manager} {problem}): the Mac's "
                f"firewall drops it, or the address is not the Mac's: allow python and raylet (the Mac's step "
                f"2), and check MAC_IP.")
    return (f"{where} nothing listens on the Mac ({mac_ip}:{ports.node_manager} {problem}): its `ray start` "
            f"failed; read what it printed there (the token, the Ray or Python version, the firewall "
            f"of this desktop), or run `hetlab doctor --head {shlex.quote(gcs_address(desktop_ip, ports.gcs))}` on the Mac.")


def remember(desktop_ip: str, mac_ip: str, port: int = Ports.gcs) -> tuple[str, str]:
    """Save the pair here and, through a task pinned to the Mac's node, on the Mac: each machine's
    ``hetlab head/join --start`` reads its own copy on day two. Returns both files' paths."""
    here = saved_pair.save(desktop_ip, mac_ip, port)
    there = ray.get(ray.remote(num_cpus=0)(saved_pair.save).options(**placement("mac"))
                    .remote(desktop_ip, mac_ip, port), timeout=60)
    return str(here), str(there)
