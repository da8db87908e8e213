"""Ray Train's configuration for a Mac and a CUDA desktop (notebook 07): what each default would get
wrong on an unlike pair, and what hetlab sets instead (the comment at each setting says why).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Sequence

from hetlab import environment
from hetlab.errors import HetlabError
from hetlab.vocab import Ports

RENDEZVOUS_TIMEOUT_S = 60  # torch's default is 30 min: a blocked port would look like a hang
# Ray Train's own settings for a run of two machines, unless you set them yourself.
TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",   # default 2 s: the controller noticed the end late
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",    # watches for nodes being drained (cloud preemption):
}                                                  # none in a home pair; one actor fewer to start

# By default Ray Train retries a run whose node went away, forever: with a rank's machine gone,
# fit() never returned. Here every failure ends the run, and explain_failure says why.
NO_RETRIES = dict(max_failures=0, controller_failure_limit=0, max_preemption_failures=0)


def train_env():
    """``TRAIN_ENV`` in this process's environment while a run starts, each variable only where you
    have not set it."""
    return environment(TRAIN_ENV, keep_set=True)


def torch_config():
    """``TorchConfig`` for the pair: the ranks meet in rank 0's rendezvous store on hetlab's pinned
    ``Ports.train_rendezvous``, give up after ``RENDEZVOUS_TIMEOUT_S`` instead of 30 minutes, and exchange
    through ``"hetlab"`` (``hetlab.raytrain.exchange``: gloo's Linux and macOS transports never meet)."""
    import ray
    from ray._common.network_utils import build_address
    from ray.train.torch import TorchConfig
    from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend

    from hetlab.raytrain import exchange

    class PairBackend(_TorchBackend):
        def on_start(self, worker_group, backend_config):
            worker_group.execute(exchange.register)   # known in every rank before the group starts
            master = worker_group.execute_single(0, ray.util.get_node_ip_address)
            url = f"tcp://{build_address(master, Ports.train_rendezvous)}"
            worker_group.execute(_set_torch_distributed_env_vars)
            ray.get([worker_group.execute_single_async(
                i, _setup_torch_process_group, backend=backend_config.backend, world_rank=i,
                world_size=len(worker_group), init_method=url, timeout_s=backend_config.timeout_s)
                for i in range(len(worker_group))])

    class PairTorchConfig(TorchConfig):
        @property
        def backend_cls(self):
            return PairBackend

    return PairTorchConfig(backend=exchange.BACKEND, timeout_s=RENDEZVOUS_TIMEOUT_S)


# GPU means CUDA and NCCL to Ray Train, but Ray 2.60 reports a Mac's GPU as GPU: 1 too: use_gpu=True
# would start NCCL on the Mac. So no GPU request: Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for such
# a rank (Ray issue 54868), and it trains on the card uncounted.
def scaling_config(roles: Sequence[str] = ("desktop", "mac")):
    """One CPU per rank, no GPU request (so no NCCL), rank *i* pinned to ``roles[i]``."""
    from ray.train import ScalingConfig

    from hetlab.cluster.roles import role_label

    return ScalingConfig(num_workers=len(roles), use_gpu=False, resources_per_worker={"CPU": 1},
                         label_selector=[role_label(r) for r in roles])


def run_config(storage_path: str | None):
    """Where rank 0's checkpoint goes (default: a new temp folder here), and no retries."""
    from ray.train import FailureConfig, RunConfig

    return RunConfig(storage_path=storage_path or tempfile.mkdtemp(prefix="hetlab-raytrain-"),
                     failure_config=FailureConfig(**NO_RETRIES))


@dataclass(frozen=True)
class LoopConfig:
    """What every rank's loop reads: ``train_mixed``'s arguments, checked by ``loop_config``; it
    travels whole in Ray Train's ``train_loop_config`` dict, as ``{"loop": LoopConfig(...)}``."""

    steps: int
    global_batch: int                  # B, cut into the ranks' batch sizes b_i
    batch_sizes: tuple | None          # the split, one size per rank; None: by the ranks' measured speeds
    roles: tuple                       # rank i's machine role (its node label)
    devices: tuple                     # per rank: "auto", "cuda", "mps", "cpu", …, resolved on its machine
    slowdowns: tuple                   # per rank: 1 = real speed, N = a simulated N× slower device
    seed: int = 0
    train_samples: int | None = None   # a part of MNIST (None: all of it)
    test_samples: int | None = None


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _per_rank(value, n: int, what: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise HetlabError(f"{what} {value!r} has {len(values)} entries for {n} ranks: give one per rank.")
    return values


def loop_config(steps, global_batch, batch_sizes, roles, devices, slowdowns, seed, train_samples,
                test_samples) -> LoopConfig:
    """``train_mixed``'s arguments checked (one line each, before anything starts) and turned into
    the ``LoopConfig`` every rank's loop reads."""
    n = len(roles)
    if not _whole(steps):
        raise HetlabError(f"steps must be a whole number ≥ 1, got {steps!r}.")
    if not isinstance(global_batch, int) or global_batch < n:
        raise HetlabError(f"global batch must be a whole number ≥ {n} (one sample per rank), got {global_batch!r}.")
    if batch_sizes != "auto" and not (isinstance(batch_sizes, (list, tuple)) and len(batch_sizes) == n
                                      and all(map(_whole, batch_sizes)) and sum(batch_sizes) == global_batch):
        raise HetlabError(f"batch_sizes must be 'auto' or one whole number ≥ 1 per rank summing to the global "
                          f"batch {global_batch}, like [96, 32], got {batch_sizes!r}.")
    slow = [float(s) for s in _per_rank(slowdowns, n, "slowdowns")]
    if not all(1.0 <= s < float("inf") for s in slow):
        raise HetlabError(f"slowdowns must be finite and ≥ 1 (1 = real speed), got {slowdowns!r}.")
    return LoopConfig(steps, global_batch, None if batch_sizes == "auto" else tuple(batch_sizes), tuple(roles),
                      tuple(_per_rank(devices, n, "devices")), tuple(slow), seed, train_samples, test_samples)


def check_cluster(roles: Sequence[str], storage_path: str | None) -> None:
    """Fail in a second, not after Train's start-up timeout: Ray connected, a live node for every
    role, and rank 0 on this machine unless ``storage_path`` is a folder every node reaches."""
    import ray

    from hetlab.cluster.roles import joined

    rank0_nodes = [joined(role, "Ray Train")[0] for role in roles][0]
    # rank 0 writes the checkpoint: a temp dir here works only if it runs here
    if storage_path is None and ray.get_runtime_context().get_node_id() not in {n["NodeID"] for n in rank0_nodes}:
        raise HetlabError(f"rank 0 runs on the {roles[0]!r} machine, not on this driver's, and Ray Train "
                          f"writes its checkpoint there: give storage_path= a folder every node can reach "
                          f"(NFS, SMB, a bucket), or run the driver on the {roles[0]!r} machine.")
