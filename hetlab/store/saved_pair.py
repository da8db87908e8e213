"""Your pair, remembered: notebook 04 saves it once connected, and everything after reads it.

One small file, ``pair.json``, in your figures folder (``hetlab.store.measured.folder()``: the
checkout's ``measured/``, which git ignores, so a new version of the course keeps it). It holds the
head's address and each machine's LAN address. ``cluster.connect()``, ``the_pair()`` and
``hetlab head/join --start`` read it when no variable or flag says otherwise, so no notebook asks
for an ``export`` line or a restart of JupyterLab. Tests point ``HETLAB_MEASURED`` elsewhere.
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path

from hetlab.store import measured
from hetlab.errors import HetlabError
from hetlab.vocab import Ports

FILE = "pair.json"


@dataclass(frozen=True)
class SavedPair:
    """The pair notebook 04 connected: the desktop (the head) and the Mac, by LAN address."""

    desktop_ip: str
    mac_ip: str
    port: int = Ports.gcs
    saved: str = ""          # when notebook 04 saved it (local time, minutes)

    @property
    def address(self) -> str:
        """The head's Ray address, ``IP:PORT``."""
        host = f"[{self.desktop_ip}]" if ":" in self.desktop_ip else self.desktop_ip
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"your pair: desktop ({self.desktop_ip}) + mac ({self.mac_ip})"


def path(where: str | Path | None = None) -> Path:
    """Where the pair is kept: ``pair.json`` in the figures folder (``$HETLAB_MEASURED`` in tests)."""
    return Path(where if where is not None else measured.folder()) / FILE


def save(desktop_ip: str, mac_ip: str, port: int = Ports.gcs, where: str | Path | None = None) -> Path:
    """Remember the pair (notebook 04, once the Mac has joined); returns the file written.
    ``where``: another figures folder than this machine's (two hosts on one box)."""
    for ip, what in ((desktop_ip, "desktop"), (mac_ip, "Mac")):
        try:
            ipaddress.ip_address(str(ip))
        except ValueError:
            raise HetlabError(f"the {what}'s address {ip!r} is not an IP address: nothing saved.") from None
    pair = SavedPair(str(desktop_ip), str(mac_ip), int(port),
                     datetime.datetime.now().isoformat(timespec="minutes"))
    return measured.write(path(where), asdict(pair))   # as every figure is written: whole, or not at all


def load() -> SavedPair | None:
    """The saved pair, or None when notebook 04 has not connected one here yet.

    A file that cannot be read is one line that says how to start again, never a guess.
    """
    target = path()
    return measured.read(target, lambda data: SavedPair(str(data["desktop_ip"]), str(data["mac_ip"]),
                                                        int(data.get("port", Ports.gcs)), str(data.get("saved", ""))),
                         HetlabError(f"{target} is not a pair hetlab saved: delete it and run notebook 04 again."))
