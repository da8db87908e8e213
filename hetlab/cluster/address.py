"""Which cluster was asked for, and where that came from: worked out here once (notebooks 03-08, ``hetlab``).

``requested_address`` reads, in order, an address given in the call (a flag), ``HETLAB_ADDRESS``,
``RAY_ADDRESS``, then the pair notebook 04 saved (``saved_pair``). ``connect``, ``which_cluster`` and
the CLI read its answer; nothing else reads those variables or the saved pair's file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from hetlab.store import saved_pair
from hetlab.vocab import ADDRESS_ENV, RAY_ADDRESS_ENV

GIVEN, SAVED, NONE = "given", "saved pair", "none"   # the sources besides the two variables' names


@dataclass(frozen=True)
class Requested:
    """The address asked for (None: none; ``"local"``: this machine alone), where it came from (``GIVEN``,
    ``HETLAB_ADDRESS``, ``RAY_ADDRESS``, ``SAVED`` or ``NONE``), and the saved pair (None: none saved)."""

    address: str | None
    source: str
    pair: saved_pair.SavedPair | None = None

    @property
    def real(self) -> bool:
        """True when a cluster was asked for: not the practice cluster, not a local Ray."""
        return self.address not in (None, "local")

    @property
    def from_saved(self) -> bool:
        return self.source == SAVED


def requested_address(address: str | None = None) -> Requested:
    """The cluster asked for: ``address``, else ``HETLAB_ADDRESS``, else ``RAY_ADDRESS``, else the
    pair notebook 04 saved; none of them: the practice cluster or a local Ray.
    ``"local"`` asks for this machine alone even when a pair is saved."""
    pair = saved_pair.load()
    for value, source in ((address, GIVEN), (os.environ.get(ADDRESS_ENV), ADDRESS_ENV),
                          (os.environ.get(RAY_ADDRESS_ENV), RAY_ADDRESS_ENV)):
        if value is not None and str(value).strip():
            return Requested(str(value).strip(), source, pair)
    return Requested(pair.address, SAVED, pair) if pair else Requested(None, NONE)


def saved_hint(requested: Requested) -> str:
    """How to read a failure to reach the saved pair's head (nothing for another address)."""
    if not requested.from_saved:
        return ""
    return (f" (your pair, saved by notebook 04 in {saved_pair.path()}: start it with `hetlab head --start` "
            f"on the desktop, then `hetlab join --start` on the Mac; or {ADDRESS_ENV}=local for the "
            f"practice cluster)")
