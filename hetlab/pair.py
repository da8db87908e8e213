"""The two machines to train on, in one call (notebooks 05–09, ``hetlab train``): your pair when notebook 04
saved one (or ``HETLAB_ADDRESS`` / ``RAY_ADDRESS``), each worker pinned to its machine by role; else the
practice cluster here (two real Ray nodes on the CPU, the "mac" a *simulated* slower device). Also which
machine this kernel runs on (``this_kernel``), every notebook's first output.
"""
from __future__ import annotations

import ipaddress
import platform
from dataclasses import dataclass

from hetlab.cluster.connecting import SAVED, Requested, connect, parse_address, requested_address
from hetlab.cluster import joining
from hetlab.errors import HetlabError
from hetlab.ps.specs import WorkerSpec
from hetlab.store.measured import guess_role
from hetlab.vocab import LAB_PORT, LAB_TUNNEL_PORT


@dataclass
class Pair:
    """Where training runs: the workers, and the practice cluster if that is what started."""

    workers: list[WorkerSpec]
    address: str | None = None   # the real cluster's address; None on the practice cluster
    practice: object = None      # the PracticeCluster started here, or None

    @property
    def real(self) -> bool:   # a cluster you started (your pair, or hosts playing it), not the practice one
        return self.practice is None

    @property
    def slowdowns(self) -> list[float]:
        return [w.slowdown for w in self.workers]

    @property
    def device(self) -> str:   # what every worker asks for: "auto" on the real pair, "cpu" in practice
        return self.workers[0].device

    def shutdown(self) -> None:
        """Stop the practice cluster if this call started one (a real cluster is left running)."""
        if self.practice is not None:
            self.practice.shutdown()

    def __enter__(self) -> "Pair":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __str__(self) -> str:
        where = (f"the cluster at {self.address}" if self.real
                 else "the practice cluster on this machine (two Ray nodes)")
        return f"{where}; workers: {', '.join(w.label for w in self.workers)}"


PRACTICE_LINE = "practice cluster (simulated): your pair is not connected — notebook 04 connects it"


def which_cluster(address: str | None = None) -> str:
    """The cluster ``the_pair()`` will use, in one line, without connecting."""
    requested = requested_address(address)
    if not requested.real:
        return PRACTICE_LINE
    if requested.source == SAVED:
        return str(requested.pair)
    return f"your pair: the head at {requested.address} (from {requested.source})"


def the_pair(practice_slowdown: float = 4.0, slowdown: float | None = None,
             address: str | None = None) -> Pair:
    """Connect to your pair (``address``, else as ``which_cluster``), or start the practice cluster, whose
    mac is simulated ``practice_slowdown``× slower; ``slowdown`` slows the mac, simulated, on either."""
    if slowdown is not None and not 1 <= slowdown < float("inf"):
        raise HetlabError(f"slowdown={slowdown!r}: give X ≥ 1, the mac's simulated slowdown (1 = none).")
    requested = requested_address(address)
    if requested.real:
        connect(address)  # the same resolution; fails within seconds, in one line, if the head is not there
        practice, device, mac_slowdown = None, "auto", slowdown or 1.0
    else:
        from hetlab.cluster.practice import PracticeCluster  # Ray's cluster_utils: only when practising
        practice, device, mac_slowdown = PracticeCluster(("desktop", "mac")), "cpu", slowdown or practice_slowdown
    workers = [WorkerSpec("desktop", role="desktop", device=device),
               WorkerSpec("mac", role="mac", device=device, slowdown=mac_slowdown)]
    print(which_cluster(address), flush=True)
    return Pair(workers, requested.address if practice is None else None, practice)


ON_THE_HEAD = ("03", "04", "05", "06", "07", "08", "09")   # the notebooks whose driver must be the head
NAMES = {"desktop": "the desktop", "mac": "the Mac"}


def kernel_line(requested: Requested, here: set[str], hostname: str, os_role: str) -> tuple[str, str | None]:
    """This kernel's machine and role in one line, and the line that stops a notebook whose driver must be
    the head when this machine (its addresses ``here``) is not the head asked for, else None."""
    if not requested.real:                             # no pair: the practice cluster, on this machine
        return (f"this kernel: {hostname}, {NAMES.get(os_role, os_role)} (no pair saved: the practice "
                f"cluster stands in for both machines)", None)
    head, pair = parse_address(requested.address)[0], requested.pair
    role = joining.role_here(pair, here) if pair else None
    try:
        on_head = head in here or ipaddress.ip_address(head).is_loopback
    except ValueError:                                 # a host name: which machine it is is not known here
        return (f"this kernel: {hostname}, {NAMES.get(role or os_role)}; the head: {head}", None)
    head_role = ("desktop" if head == pair.desktop_ip else "mac" if head == pair.mac_ip else None) if pair else None
    head_name = NAMES.get(head_role, "the head")
    if on_head:
        return f"this kernel: {hostname}, {NAMES.get(role or head_role or os_role)}, the head of your pair ({head})", None
    if role is None and pair is not None and requested.source == SAVED:   # neither saved address is here
        return (f"this kernel: {hostname}, {NAMES.get(os_role)}, not at its saved address",
                f"this machine holds neither address of the saved pair (desktop {pair.desktop_ip}, Mac {pair.mac_ip}): one moved; run notebook 04 "
                f"again with the new one, on the desktop (it prints new lines and saves the pair again).")
    me = NAMES.get(role or os_role)
    where = f"the head, {head_name} ({head})" if head_role else f"the head ({head})"
    stop = (f"this notebook runs on {where}, not on this machine ({me}): open it in {head_name}'s JupyterLab "
            f"— from here, run `ssh -N -L {LAB_TUNNEL_PORT}:127.0.0.1:{LAB_PORT} USER@{head}` (USER: your "
            f"user name there) and open the URL its `make lab` printed with {LAB_TUNNEL_PORT} in place of "
            f"{LAB_PORT} (README, step 4).")
    return f"this kernel: {hostname}, {me}, not the head of your pair ({head_name}, {head})", stop


def this_kernel(notebook: str | None = None) -> str:
    """Print which machine this kernel runs on and its role, and stop a notebook of ``ON_THE_HEAD`` in one
    line, saying where to open it, when this machine is not the head of the cluster asked for."""
    line, stop = kernel_line(requested_address(), joining.addresses_here(), platform.node() or "this machine",
                             guess_role())
    print(line, flush=True)
    if stop and str(notebook) in ON_THE_HEAD:
        raise HetlabError(stop)
    return line

