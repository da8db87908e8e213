"""Your pair, remembered: notebook 04 saves it once connected, and everything after reads it.

One small file, ``pair.json``, in your figures folder (``hetlab.store.measured.folder()``: the
checkout's ``measured/``, which git ignores, so a new version of the course keeps it). It holds the
head's address and each machine's LAN address. ``cluster.connect()``, ``the_pair()`` and
``hetlab head/join --start`` read it when no variable or flag says otherwise, so no notebook asks
for an ``export`` line or a restart of JupyterLab. Tests point ``HETLAB_MEASURED`` elsewhere.
"""
from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path

from hetlab.store import measured
from hetlab.errors import HetlabError
from hetlab.vocab import Ports

NAME = "pair"


@dataclass(frozen=True)
class SavedPair:
    """The pair notebook 04 connected: the desktop (the head) and the Mac, by LAN address."""

    desktop_ip: str
    mac_ip: str
    port: int = Ports.gcs
    saved: str = ""          # when notebook 04 saved it (local time, minutes; the file's date)

    @property
    def address(self) -> str:
        """The head's Ray address, ``IP:PORT``."""
        host = f"[{self.desktop_ip}]" if ":" in self.desktop_ip else self.desktop_ip
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"your pair: desktop ({self.desktop_ip}) + mac ({self.mac_ip})"


def path(where: str | Path | None = None) -> Path:
    """Where the pair is kept: ``pair.json`` in the figures folder (``$HETLAB_MEASURED`` in tests)."""
    return measured.path(NAME, where)


def save(desktop_ip: str, mac_ip: str, port: int = Ports.gcs, where: str | Path | None = None) -> Path:
    """Remember the pair (notebook 04, once the Mac has joined); returns the file written.
    ``where``: another figures folder than this machine's (two hosts on one box)."""
    for ip, what in ((desktop_ip, "desktop"), (mac_ip, "Mac")):
        try:
            ipaddress.ip_address(str(ip))
        except ValueError:
            raise HetlabError(f"the {what}'s address {ip!r} is not an IP address: nothing saved.") from None
    return measured.save_figure(NAME, asdict(SavedPair(str(desktop_ip), str(mac_ip), int(port))), where)


def load() -> SavedPair | None:
    """The saved pair, or None when notebook 04 has not connected one here yet; a file that cannot be
    read is one line that says how to start again, never a guess."""
    data = measured.load_figure(NAME, None, lambda d: isinstance(d["desktop_ip"], str) and isinstance(d["mac_ip"], str),
                                "run notebook 04 again")
    return None if data is None else SavedPair(data["desktop_ip"], data["mac_ip"], int(data["port"]), data["date"])
