"""hetlab's vocabulary: the names every layer agrees on, every environment variable it reads and every
port a node listens on, defined once. No torch or Ray here, so ``hetlab --help`` stays fast.
"""
from dataclasses import dataclass

MODES = ("sync", "async", "local_sgd")                # how workers and server take turns (05, 08)
CLI_MODES = {"sync": "sync", "async": "async", "local-sgd": "local_sgd", "local_sgd": "local_sgd"}
TRANSFERS = ("fp32", "fp16")                          # gradients / deltas on the wire (08)
BYTES_PER_VALUE = {"fp32": 4, "fp16": 2}              # of each transfer format
WEIGHTS_DOWN = "fp32"                                 # the server always sends fp32 weights
OPTIMIZERS = ("adam", "sgd")                          # the server's, in sync and async modes
DEVICE_KINDS = ("cuda", "mps", "cpu")                 # what torch can train on (01)
MODEL_NAMES = ("small", "classic")     # the built-in networks, hetlab.core.models.MODELS
ROLES = ("desktop", "mac")                            # the two machines of the course (03)

# environment variables hetlab reads
ADDRESS_ENV = "HETLAB_ADDRESS"      # the Ray head of the real pair: notebooks 03-08 run there
QUICK_ENV = "HETLAB_QUICK"          # 1: the short runs of `make test`
ORIGIN_ENV = "HETLAB_ORIGIN"        # set from outside on a host playing a machine it is not: its label (core.machine)
MEASURED_ENV = "HETLAB_MEASURED"    # a folder for the figures notebooks save (hetlab.store.measured)

# Ray's environment variables that hetlab reads, sets or checks (notebook 04)
RAY_ADDRESS_ENV = "RAY_ADDRESS"                                 # Ray's own: the cluster, read after HETLAB_ADDRESS
RAY_AUTH_ENV = "RAY_AUTH_MODE"                                  # "token" on every node and driver
RAY_MAC_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"       # "1" on the Mac's `ray start` line only
RAY_PYTHON_MATCH_ENV = "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"  # "patch" (Ray's default) or "minor"
TOKEN_PATH = "~/.ray/auth_token"                                # where the printed steps keep Ray's token
# A Linux node playing the Mac speaks gloo's UV, as a real Mac's torch does: Linux's TCP gloo refuses it at once.
MAC_GLOO_STANDIN = {"GLOO_DEVICE_TRANSPORT": "UV"}


LAB_PORT = 8888          # JupyterLab on each machine (`make lab`)
LAB_TUNNEL_PORT = 8889   # the desktop's lab, forwarded to the Mac (README, step 4): the Mac's own is on 8888


@dataclass(frozen=True)
class Ports:
    """Every port a node listens on. The defaults make two short firewall ranges (notebook 04)."""

    gcs: int = 6379                  # head only: where other nodes and drivers connect
    node_manager: int = 6380         # raylet
    object_manager: int = 6381       # object transfer between nodes
    runtime_env_agent: int = 6382
    dashboard_agent_grpc: int = 6383
    dashboard_agent_http: int = 6384
    metrics_export: int = 6385
    dashboard: int = 8265            # head only, bound to 127.0.0.1
    client_server: int = 10001       # head only: Ray Client (ray://)
    min_worker: int = 10002          # one port per worker process
    max_worker: int = 10063
    # head only, Prometheus, set by env: Ray's defaults sit inside Linux's ephemeral range
    autoscaler_metrics: int = 8266   # AUTOSCALER_METRIC_PORT
    dashboard_metrics: int = 8267    # DASHBOARD_METRIC_PORT
    train_rendezvous: int = 6386     # Ray Train (notebook 07): rank 0's rendezvous store, on the desktop

    def local_only(self, head: bool) -> list[int]:
        """Ports the other machine never needs: keep them closed in the firewall."""
        return [self.dashboard, self.autoscaler_metrics, self.dashboard_metrics] if head else []

    def listening(self, head: bool) -> list[int]:
        """Ports other machines may need to reach: what the firewall opens (see ``local_only``)."""
        own = [self.node_manager, self.object_manager, self.runtime_env_agent,
               self.dashboard_agent_grpc, self.dashboard_agent_http, self.metrics_export]
        shared = [self.gcs, self.client_server] if head else []
        return sorted(shared + own + list(range(self.min_worker, self.max_worker + 1)))
