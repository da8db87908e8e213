"""Can this machine reach a Ray head? Addresses, ports and the GCS, checked in seconds (notebook 04).

``ray.init(address=...)`` has no timeout: against a wrong address it retries for
minutes. These checks run first, each bounded, each with a reason a learner can act
on. They send nothing anywhere but the address they are given. Also here: starting a
Ray node once more when it did not come up in time (``start_with_retry``), and cleaning up
after it (``stop_children_since``).
"""
from __future__ import annotations

import socket

from typing import Callable, TypeVar

from hetlab.errors import HetlabError
from hetlab.vocab import Ports

T = TypeVar("T")
STARTUP_TIMED_OUT = "timed out during startup"  # Ray's words when a node misses its start-up window



def parse_address(address: str) -> tuple[str, int, bool]:
    """Split ``"host:port"`` / ``"host"`` / ``"ray://host:port"`` into (host, port, is_ray_client)."""
    text = str(address).strip()
    client = text.startswith("ray://")
    rest = text[len("ray://"):] if client else text
    if rest in ("", "auto", "local") or "/" in rest or " " in rest:
        raise HetlabError(f"malformed cluster address {address!r}: give the head as IP:PORT, "
                          f"e.g. 192.168.1.10:6379 (the GCS port printed by `hetlab head`).")
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        host, port_text = rest, str(Ports.client_server if client else Ports.gcs)
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536 or host.startswith("[") != host.endswith("]"):
        raise HetlabError(f"malformed cluster address {address!r}: give the head as IP:PORT "
                          f"with a port between 1 and 65535, e.g. 192.168.1.10:6379.")
    return host.strip("[]"), port, client


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
    import time

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
