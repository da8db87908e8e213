"""Connect this process to Ray: your pair, or a local Ray, in seconds or one line why not (notebooks 03, 04).

``requested_address`` says which cluster was asked for, once: an address given in the call (a flag),
``HETLAB_ADDRESS``, ``RAY_ADDRESS``, then the pair notebook 04 saved (``saved_pair``). ``connect`` checks
the head answers (``port_open``, ``probe_gcs``: ``ray.init`` has no timeout and retries a wrong address
for minutes), then connects within a deadline and refuses a node on other code (``check_same_code``).
Ray's token file is kept private (``secure_token_files``: Ray 2.60 writes ``~/.ray/auth_token`` 0644).
``nodes()`` / ``node_table()``: what every node runs, asked on the node itself (``machine.facts``).
"""
from __future__ import annotations

import logging
import math
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import ray

from hetlab.cluster.raylog import explain_token_auth
from hetlab.cluster.roles import ROLE_LABEL, live_nodes, node_name
from hetlab.core import samecode
from hetlab.errors import HetlabError
from hetlab.store import saved_pair
from hetlab.vocab import ADDRESS_ENV, RAY_ADDRESS_ENV, RAY_AUTH_ENV, Ports


# --- which cluster was asked for (notebooks 03-08, ``hetlab``) --------------------------------------

SAVED = "saved pair"   # where an address came from, besides "given" and the two variables' names


@dataclass(frozen=True)
class Requested:
    """The address asked for (None: none; ``"local"``: this machine alone), where it came from, and the
    saved pair (None: none saved)."""

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
    for value, source in ((address, "given"), (os.environ.get(ADDRESS_ENV), ADDRESS_ENV),
                          (os.environ.get(RAY_ADDRESS_ENV), RAY_ADDRESS_ENV)):
        if value is not None and str(value).strip():
            return Requested(str(value).strip(), source, pair)
    return Requested(pair.address, SAVED, pair) if pair else Requested(None, "none")


# --- can this machine reach the head? (notebook 04, ``hetlab doctor``) --------------------------------

T = TypeVar("T")
STARTUP_TIMED_OUT = "timed out during startup"  # Ray's words when a node misses its start-up window


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` / ``"host"`` (the GCS port) / ``"[IPv6]:port"`` into (host, port)."""
    rest = str(address).strip()
    if rest in ("", "auto", "local") or "/" in rest or " " in rest:
        raise HetlabError(f"malformed cluster address {address!r}: give the head as IP:PORT, "
                          f"e.g. 192.168.1.10:6379 (the GCS port printed by `hetlab head`).")
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        host, port_text = rest, str(Ports.gcs)
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536 or host.startswith("[") != host.endswith("]"):
        raise HetlabError(f"malformed cluster address {address!r}: give the head as IP:PORT "
                          f"with a port between 1 and 65535, e.g. 192.168.1.10:6379.")
    return host.strip("[]"), port


def port_open(host: str, port: int, timeout: float = 3.0) -> str | None:
    """None if a TCP connection to host:port opens within ``timeout``, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.timeout:
        return "no answer (timed out: a firewall dropping packets, or the wrong IP)"
    except ConnectionRefusedError:
        return "connection refused (nothing listens there: is the head started, is the port right?)"
    except OSError as exc:
        return f"{exc.strerror or exc} (check the host name or IP)"


def probe_gcs(host: str, port: int, timeout: float = 5.0) -> str | None:
    """Ask the GCS at host:port for its cluster id, the first thing ``ray.init`` asks.

    Sends the same token ``ray.init`` would send (none unless ``RAY_AUTH_MODE=token``).
    Returns None when the head answers, else why not: ``ray.init`` itself would
    retry a wrong token or a silent port for minutes; this tells in seconds.
    """
    import grpc
    from ray._raylet import AuthenticationTokenLoader
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    loader = AuthenticationTokenLoader.instance()
    try:
        metadata = tuple(loader.get_token_for_http_header().items()) if loader.has_token() else ()
    except Exception as exc:  # noqa: BLE001 - ray.exceptions.AuthenticationError: token mode, no token
        if "token" not in str(exc).lower():
            raise
        return ("RAY_AUTH_MODE=token is set here but this machine has no Ray token: copy the head's "
                "token (`ray get-auth-token` there) to ~/.ray/auth_token, chmod 600")
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=metadata)
            return None
        except grpc.RpcError as exc:
            code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return ("the head refused this client's token: set RAY_AUTH_MODE=token here and copy the "
                "head's token (`ray get-auth-token` there) to ~/.ray/auth_token, chmod 600")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (f"it accepts connections but did not answer like a Ray head within {timeout:.0f} s: "
                f"check the port is the GCS port printed by `hetlab head` (default {Ports.gcs})")
    return f"it does not answer like a Ray head ({code.name}): check the address and port"


def stop_children_since(since: float, keep=()) -> None:
    """Kill this process's descendants started after ``since`` (a half-started Ray node),
    except the processes in ``keep`` and their descendants."""
    import psutil
    doomed = []
    for proc in psutil.Process().children(recursive=True):
        try:
            family = {proc.pid} | {parent.pid for parent in proc.parents()}
            if proc.create_time() >= since - 1 and not family & set(keep):
                doomed.append(proc)
        except psutil.Error:
            pass
    for proc in doomed:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(doomed, timeout=10)


def start_with_retry(start: Callable[[], T], clean_up: Callable[[float], None],
                     give_up: Callable[[Exception, bool], Exception | None]) -> T:
    """``start()``; if Ray says a node "timed out during startup" (its fixed 15-30 s windows can
    pass on a busy machine), ``clean_up(started)`` and ``start()`` once more (notebook 03).

    Any other failure, or a second time-out, is cleaned up too and raises ``give_up(exc,
    timed_out)`` (or ``exc`` itself where that returns None). Used by ``cluster.connect``,
    ``PracticeCluster.add_node`` and the tests' local Ray.
    """
    for attempt in (1, 2):
        started = time.time()
        try:
            return start()
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception here
            timed_out = STARTUP_TIMED_OUT in str(exc)
            clean_up(started)
            if attempt == 2 or not timed_out:
                error = give_up(exc, timed_out)
                if error is None:
                    raise
                raise error from None
    raise AssertionError("unreachable")


# --- the token, private (notebook 04) -------------------------------------------------------------

OPEN_BITS = 0o077  # any permission for group or others


def default_token_path() -> Path:
    """``~/.ray/auth_token``: where Ray writes a generated token."""
    return Path.home() / ".ray" / "auth_token"


def token_files() -> list[Path]:
    """The token files Ray may read here: ``$RAY_AUTH_TOKEN_PATH`` (if set), then ``~/.ray/auth_token``."""
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    return list(dict.fromkeys(([Path(named).expanduser()] if named else []) + [default_token_path()]))


def secure_token_files() -> list[Path]:
    """chmod 600 every existing token file that group or others can access; returns those changed.
    A file this user cannot change is left as it is (``hetlab doctor`` reports it)."""
    changed = []
    for path in token_files():
        if path.is_file() and stat.S_IMODE(path.stat().st_mode) & OPEN_BITS:
            try:
                os.chmod(path, 0o600)
                changed.append(path)
            except OSError:
                pass
    return changed


def enable_local_token_auth() -> None:
    """Token auth as Ray 2.60's own local ``ray.init()`` does it, with a private token file.

    Unless ``RAY_AUTH_MODE`` is set, turn token auth on for this process and its children,
    and create ``~/.ray/auth_token`` if no token exists — under umask 077, so the file is
    0600 from the start (Ray alone leaves it 0644) — then chmod 600 any token file that
    is still open to others.
    """
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default, ensure_token_if_auth_enabled)
    explain_token_auth()  # Ray's "Token authentication is enabled" warning → one hetlab line
    enable_token_auth_by_default()
    previous = os.umask(0o077)
    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    finally:
        os.umask(previous)
    secure_token_files()


def token_mode() -> None:
    """The pair always runs with token auth (notebook 04): a driver whose shell did not export
    ``RAY_AUTH_MODE=token`` gets it here, and Ray's cached config sees it (as Ray's own local default does)."""
    if os.environ.get(RAY_AUTH_ENV):
        return
    from ray._raylet import AuthenticationTokenLoader, Config
    os.environ[RAY_AUTH_ENV] = "token"
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


# --- the connection ---------------------------------------------------------------------------------

def check_timeout(timeout) -> float:
    """``timeout`` as seconds, or a one-line HetlabError unless it is a finite number > 0."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(timeout, bool) or not 0 < seconds < math.inf:
        raise HetlabError(f"timeout={timeout!r}: give the seconds to wait for the head as a number "
                          f"above 0, e.g. timeout=15.")
    return seconds


def connect(address: str | None = None, timeout: float = 15.0, num_cpus: int | None = None,
            same_code: bool = True):
    """Connect this process to Ray and return Ray's context (notebooks 03, 04).

    No address (neither ``HETLAB_ADDRESS`` nor ``RAY_ADDRESS`` set, and no pair saved): start an
    embedded local Ray, quiet, its dashboard off, on ``num_cpus``. With an address, connect to that
    cluster or fail within ``timeout`` seconds with one line saying what to check; never fall back to a
    local Ray. A node whose hetlab is not this process's is refused (``check_same_code``;
    ``same_code=False``: the doctor, which reports it instead). Calling it again replaces the connection.
    """
    timeout = check_timeout(timeout)
    requested = requested_address(address)
    if requested.real:
        host, port = parse_address(requested.address)  # a typo fails before anything changes
    if ray.is_initialized():
        ray.shutdown()
    if not requested.real:
        enable_local_token_auth()  # what ray.init() would do, but the token file private

        def clean_up(started: float) -> None:
            ray.shutdown()
            stop_children_since(started)

        return start_with_retry(
            lambda: ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                             logging_level=logging.WARNING),
            clean_up,
            lambda exc, _: HetlabError(f"local Ray did not start: {type(exc).__name__}: {str(exc)[:160]} — "
                                       f"close other Ray sessions or busy programs and run this again."))
    secure_token_files()  # the token this client sends must not be readable by others here
    token_mode()
    hint = (f" (your pair, saved by notebook 04 in {saved_pair.path()}: start it with `hetlab head --start` "
            f"on the desktop, then `hetlab join --start` on the Mac; or {ADDRESS_ENV}=local for the "
            f"practice cluster)") if requested.from_saved else ""
    problem = port_open(host, port, timeout=min(3.0, timeout))
    if problem:
        raise HetlabError(f"cannot reach the Ray head at {host}:{port}: {problem}{hint}; "
                          f"run `hetlab doctor --head {host}:{port}` for the full check.")
    problem = probe_gcs(host, port, timeout=min(5.0, timeout))
    if problem:
        raise HetlabError(f"cannot use the Ray head at {host}:{port}: {problem}.")
    from ray._private.services import find_node_ids
    if not find_node_ids():  # ray.init would look for a node here for 60 s, then fail
        raise HetlabError(f"no Ray node runs on this machine, and a notebook (a Ray driver) must run on a "
                          f"machine of the cluster: run it on the desktop, the head at {host}:{port}, or "
                          f"first start this machine's node with the `ray start --address ...` line of "
                          f"`hetlab join`.")
    context = _init_with_deadline(f"{host}:{port}", timeout)
    try:
        if same_code:
            check_same_code()
    except HetlabError:
        ray.shutdown()  # refused: not left connected to a pair that would run two codes
        raise
    notice = driver_notice()
    if notice:
        print(notice)
    return context


def driver_notice() -> str | None:
    """One line when this driver is not on the head: the course runs its notebooks on the
    desktop (the head), where the parameter server and Ray Train's controller then live."""
    here = ray.get_runtime_context().get_node_id()
    me = next((n for n in ray.nodes() if n["NodeID"] == here), None)
    if me is None or "node:__internal_head__" in me["Resources"]:
        return None
    role = (me.get("Labels") or {}).get(ROLE_LABEL, "a worker")
    return (f"note: this driver runs on the {role} node, not on the head: the course runs notebooks on "
            f"the desktop (the head), where the parameter server and Ray Train's controller then live; "
            f"start JupyterLab there.")


def _init_with_deadline(address: str, timeout: float):
    """``ray.init(address)`` has no timeout of its own: run it in a thread and stop waiting.
    The head answered ``probe_gcs`` just before, so a failure here is Ray's own: one line, the doctor next."""
    outcome: dict = {}

    def attempt():
        try:
            outcome["context"] = ray.init(address=address, logging_level=logging.WARNING)
            if outcome.get("abandoned"):  # the caller already gave up: do not stay connected
                ray.shutdown()
        except BaseException as exc:  # noqa: BLE001 - reported below as one line
            outcome["error"] = exc

    # Ray's note that a connect thread cannot set a SIGTERM handler is expected here
    logging.getLogger("ray._private.worker").addFilter(lambda r: "not the main thread" not in r.getMessage())
    thread = threading.Thread(target=attempt, name="hetlab-connect", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        outcome["abandoned"] = True
        raise HetlabError(f"the Ray head at {address} accepted the connection but did not answer as "
                          f"Ray within {timeout:.0f} s: check the port is the GCS port from "
                          f"`hetlab head`, and that RAY_AUTH_MODE=token and the token are set here.")
    if "error" in outcome:
        exc = outcome["error"]
        raise HetlabError(f"could not connect to the Ray head at {address}: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]} — run `hetlab doctor --head {address}`.") from None
    return outcome["context"]


# --- what every node runs, asked on the node itself (notebooks 03, 04) -------------------------------

COLUMNS = {"name": "node", "hostname": "host", "os": "OS", "ip": "IP", "cpus": "CPUs", "accelerator": "accelerator",
           "gpus_for_ray": "GPUs for Ray", "memory_gb": "memory GiB", "python": "Python", "ray": "Ray", "torch": "torch"}


def nodes(timeout: float = 60.0) -> list[dict]:
    """Ask every live node what it runs (a tiny task pinned to each node) (notebooks 03, 04).

    Each row: node_id, name, role, is_head, ip, ports, plus ``machine.facts()``
    as measured on that node (hostname, os, cpus, accelerator, memory_gb, versions).
    """
    from hetlab.core.machine import facts, origin_label
    alive, reports = _on_every_node(lambda: {**facts(), "origin": origin_label()}, timeout)
    rows = []
    for node, report in zip(alive, reports):
        name = node_name(node.get("Labels") or {}, report["hostname"])
        rows.append({"node_id": node["NodeID"],
                     "name": f"{name} ({report['origin']})" if report.get("origin") else name,
                     "role": (node.get("Labels") or {}).get(ROLE_LABEL),
                     "is_head": "node:__internal_head__" in node["Resources"], "ip": node["NodeManagerAddress"],
                     "ports": {"node manager": node.get("NodeManagerPort"),
                               "object manager": node.get("ObjectManagerPort"),
                               "metrics export": node.get("MetricsExportPort")},
                     "gpus_for_ray": node["Resources"].get("GPU", 0), **report})
    return rows


def _on_every_node(fn, timeout: float) -> tuple[list[dict], list]:
    """``fn()`` run once on every live node, head first: (Ray's node entries, their answers)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise HetlabError("not connected to Ray: call hetlab.cluster.connect() (or start a PracticeCluster) first.")
    alive = sorted(live_nodes(),
                   key=lambda n: ("node:__internal_head__" not in n["Resources"], n["NodeID"]))
    probe = ray.remote(num_cpus=0)(fn)
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in alive]
    try:
        return alive, ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise HetlabError(f"a node did not answer within {timeout:.0f} s: check `ray status` on the head "
                          f"and that hetlab is installed on every node.") from None


def check_same_code(timeout: float = 60.0) -> None:
    """Refuse, in one line naming the machine to update, a node whose hetlab (version and git
    commit, ``hetlab.core.samecode``) is not this process's: its workers would run other code.
    The report goes to the nodes by value, so a node on an older layout answers it too."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(samecode)
    alive, reports = _on_every_node(samecode.code_here, timeout)
    names = ["the " + node_name(n.get("Labels") or {}, n["NodeManagerAddress"]) for n in alive]
    here = ray.get_runtime_context().get_node_id()
    mine = next((name for n, name in zip(alive, names) if n["NodeID"] == here), "this notebook")
    problem = samecode.mismatch(mine, samecode.code_here(),
                                {("this notebook's node" if n == mine else n): r for n, r in zip(names, reports)})
    if problem:
        raise HetlabError(problem)


class NodeTable(list):
    """Rows from ``nodes()``; a readable table in a notebook (``display``) and a terminal (``print``)."""

    def __str__(self) -> str:
        cells = [list(COLUMNS.values())] + [[str(row.get(key, "")) for key in COLUMNS] for row in self]
        widths = [max(len(x) for x in column) for column in zip(*cells)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in cells]
        return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])

    __repr__ = __str__


def node_table(timeout: float = 60.0) -> NodeTable:
    """``nodes()`` as a NodeTable."""
    return NodeTable(nodes(timeout))
