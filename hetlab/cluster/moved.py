"""Day two: a machine whose address moved since notebook 04 saved the pair (``hetlab head/join --start``,
``hetlab doctor``, ``hetlab pair``; README, "Day two").

A Mac's Wi-Fi address can change overnight. ``check`` compares the saved pair with this machine's own
addresses (read from its interfaces, nothing is sent) and says in one line the old address, the new one
and the way on: ``hetlab pair --mac-ip NEW`` on both machines (``update``), which saves the new address
and, on the desktop, prints the firewall lines that admit it and delete the old address's rules.
"""
from __future__ import annotations

import socket

import psutil

from hetlab.store import saved_pair
from hetlab.cluster.commands import check_ip, firewall_ranges, train_ranges, ufw_ports
from hetlab.errors import HetlabError
from hetlab.vocab import Ports

FLAG = {"desktop": "--desktop-ip", "mac": "--mac-ip"}
THEN = {"desktop": "`hetlab head --start` here, then `hetlab join --start` on the Mac",
        "mac": "`hetlab join --start` here"}


def addresses_here() -> set[str]:
    """Every address this machine's interfaces hold now, loopback aside (psutil; nothing is sent)."""
    found = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family in (socket.AF_INET, socket.AF_INET6)}
    return {ip for ip in found if not (ip.startswith("127.") or ip == "::1")}


def toward(peer_ip: str) -> str | None:
    """This machine's own address on the way to ``peer_ip`` (the kernel's route; no packet sent), or None."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in peer_ip else socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((peer_ip, 9))
            return probe.getsockname()[0]
    except OSError:  # no route: the network is down
        return None


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
    new = toward(peer)
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
