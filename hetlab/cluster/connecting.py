"""Connect this process to Ray: your pair, or a local Ray, in seconds or one line why not (notebooks 03, 04).

``connect`` checks the head answers first (``port_open``, ``probe_gcs``: ``ray.init`` has no timeout and
retries a wrong address for minutes), and refuses a node on other code (``check_same_code``). Ray's
token file is kept private (Ray 2.60 writes ``~/.ray/auth_token`` 0644). ``nodes()``: what every node runs.
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
from hetlab.vocab import ADDRESS_ENV, RAY_ADDRESS_ENV, RAY_AUTH_ENV, TOKEN_PATH, Ports


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


def requested_address(address: str | None = None) -> Requested:
    """The cluster asked for: ``address``, else ``HETLAB_ADDRESS``, else ``RAY_ADDRESS``, else the
    pair notebook 04 saved (``"local"``: this machine alone)."""
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
    """Ask the GCS at host:port for its cluster id with the token ``ray.init`` would send; None when
    the head answers, else why not, in seconds (``ray.init`` retries a wrong token for minutes)."""
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
    """``start()``; if Ray says a node "timed out during startup" (a busy machine), ``clean_up(started)``
    and once more. Another failure, or a second time-out: cleaned up, ``give_up(exc, timed_out)`` raised
    (or ``exc`` where that returns None)."""
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


def token_files() -> list[Path]:
    """The token files Ray may read here: ``$RAY_AUTH_TOKEN_PATH`` (if set), then ``~/.ray/auth_token``."""
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    return list(dict.fromkeys(([Path(named).expanduser()] if named else []) + [Path(TOKEN_PATH).expanduser()]))


def secure_token_files() -> list[Path]:
    """chmod 600 every token file that group or others can access (one this user cannot change: the
    doctor reports it); returns those changed."""
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
    """Token auth as Ray 2.60's own local ``ray.init()`` turns it on, the token file created under
    umask 077 (0600 from the start; Ray alone leaves it 0644)."""
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
    """The pair always runs with token auth: ``RAY_AUTH_MODE=token`` for a driver whose shell did not
    export it, in Ray's cached config too."""
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

    No address asked for (``requested_address``): a local Ray on ``num_cpus``, its dashboard off. With
    one: that cluster, or one line within ``timeout`` seconds; never a local Ray instead.
    ``same_code=False``: the doctor, which reports a node on other code instead of refusing it."""
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
            f"practice cluster)") if requested.source == SAVED else ""
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
    return context


def _init_with_deadline(address: str, timeout: float):
    """``ray.init(address)``, which has no timeout of its own, in a thread that is given up after ``timeout``."""
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
    """Each live node's row: node_id, name, role, is_head, ip, ports and ``machine.facts()`` read there."""
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
    """Refuse, in one line naming the machine to update, a node whose hetlab (version and commit) is not
    this process's. The check goes to the nodes by value: a node on an older layout answers it too."""
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
