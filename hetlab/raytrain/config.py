"""Ray Train's configuration for a Mac and a CUDA desktop (notebook 07): what each default would get
wrong on an unlike pair, and what hetlab sets instead (the comment at each setting says why).

``loop_config`` checks every argument of ``train_mixed`` in one line each, before anything starts,
and returns the ``LoopConfig`` every rank's loop reads.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Sequence

from torch import nn

from hetlab import environment
from hetlab.errors import HetlabError
from hetlab.vocab import Ports

RENDEZVOUS_TIMEOUT_S = 60  # torch's default is 30 min: a blocked port would look like a hang
# Ray Train's own settings for a run of two machines (its driver passes them to its controller and
# ranks), unless you set them yourself (figures: docs/reference-figures.md, section 07).
TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",   # default 2 s: the controller noticed the end late
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",    # watches for nodes being drained (cloud preemption):
}                                                  # none in a home pair; one actor fewer to start

# Ray Train retries a run whose controller failed, or whose node went away "expectedly" (a Ray
# stopped by SIGTERM counts as preempted), forever by default: with a rank's machine gone, its
# worker group can never start again, and fit() never returned (a Mac's node stopped mid-run,
# tests/test_raytrain.py). Here every failure ends the run, and explain_failure says why.
NO_RETRIES = dict(max_failures=0, controller_failure_limit=0, max_preemption_failures=0)


def train_env():
    """``TRAIN_ENV`` in this process's environment while a run starts (Ray Train reads it there),
    each variable only where you have not set it; afterwards the environment is as it was."""
    return environment(TRAIN_ENV, keep_set=True)


def _gloo_on_node_address() -> str:
    """Make gloo use the interface holding this node's Ray address (``GLOO_SOCKET_IFNAME``).

    Left alone, gloo binds the address its hostname resolves to, which is 127.0.1.1 on a
    default Ubuntu install: the other rank would be told to connect to its own loopback.
    Returns the interface name ("" where none holds the address: gloo's own choice stays).
    """
    import psutil
    import ray

    ip = ray.util.get_node_ip_address()
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addresses):
            os.environ["GLOO_SOCKET_IFNAME"] = name
            return name
    return ""


def _pair_backend():
    """Ray Train's torch backend for the pair: the ranks meet in rank 0's rendezvous store on a
    pinned port (in the printed firewall rule), with a short timeout; with ``backend="hetlab"``
    their collectives go through that store too (``hetlab.raytrain.exchange``)."""
    import ray
    from ray._common.network_utils import build_address
    from ray.train.torch.config import (_set_torch_distributed_env_vars, _setup_torch_process_group,
                                        _TorchBackend)

    from hetlab.raytrain import exchange

    class PairBackend(_TorchBackend):
        def on_start(self, worker_group, backend_config):
            backend = backend_config.backend
            worker_group.execute(exchange.register if backend == exchange.BACKEND else _gloo_on_node_address)
            master = worker_group.execute_single(0, ray.util.get_node_ip_address)
            url = f"tcp://{build_address(master, backend_config.port)}"
            worker_group.execute(_set_torch_distributed_env_vars)
            ray.get([worker_group.execute_single_async(
                i, _setup_torch_process_group, backend=backend, world_rank=i,
                world_size=len(worker_group), init_method=url, timeout_s=backend_config.timeout_s)
                for i in range(len(worker_group))])

    return PairBackend


def torch_config(port: int | None = None, timeout_s: int = RENDEZVOUS_TIMEOUT_S, backend: str = "hetlab"):
    """``TorchConfig`` for the pair: rendezvous on ``port`` (default: hetlab's pinned
    ``Ports.train_rendezvous``), a process-group timeout of ``timeout_s`` instead of 30 minutes, and
    the ranks' exchange: ``"hetlab"`` (through the rendezvous store: a Mac and a Linux desktop) or
    ``"gloo"`` (only where every rank runs the same system: gloo's Linux and macOS transports never meet)."""
    from ray.train.torch import TorchConfig

    from hetlab.raytrain.exchange import BACKEND

    if backend not in (BACKEND, "gloo"):
        raise HetlabError(f"backend {backend!r}: use {BACKEND!r} (any pair) or 'gloo' (ranks on one system only).")

    @dataclass
    class PairTorchConfig(TorchConfig):
        port: int = Ports.train_rendezvous

        @property
        def backend_cls(self):
            return _pair_backend()

    return PairTorchConfig(backend=backend, timeout_s=timeout_s, port=port or Ports.train_rendezvous)


# GPU means CUDA and NCCL to Ray Train, but Ray 2.60 reports a Mac's GPU as GPU: 1 too: use_gpu=True
# would start NCCL on the Mac. So use_gpu=False, hetlab's exchange, a pinned rendezvous port, a short
# timeout, and each rank picks its own device. No GPU requested is not no GPU used: Ray 2.60 leaves
# CUDA_VISIBLE_DEVICES alone for such a rank (Ray issue 54868), so it trains on the card uncounted.
# Rank i is pinned to its machine by a label_selector (the hetlab-role node label).
def scaling_config(roles: Sequence[str] | None = ("desktop", "mac"), num_workers: int | None = None):
    """One CPU per rank, no GPU request (so no NCCL), rank *i* pinned to ``roles[i]``."""
    from ray.train import ScalingConfig

    if roles is None:
        return ScalingConfig(num_workers=num_workers or 2, use_gpu=False,
                             resources_per_worker={"CPU": 1})
    from hetlab.cluster.roles import role_label

    return ScalingConfig(num_workers=len(roles), use_gpu=False, resources_per_worker={"CPU": 1},
                         label_selector=[role_label(r) for r in roles])


def run_config(storage_path: str | None):
    """Where rank 0's checkpoint goes (default: a new temp folder here), and no retries."""
    from ray.train import FailureConfig, RunConfig

    return RunConfig(storage_path=storage_path or tempfile.mkdtemp(prefix="hetlab-raytrain-"),
                     failure_config=FailureConfig(**NO_RETRIES),
                     name=f"hetlab-{time.strftime('%Y%m%d-%H%M%S')}")


@dataclass(frozen=True)
class LoopConfig:
    """What every rank's loop reads: ``train_mixed``'s arguments, checked by ``loop_config`` (notebook 07).

    Ray Train hands its loop one dict (``train_loop_config``); this object travels in it whole, as
    ``{"loop": LoopConfig(...)}``, so every rank reads the same checked, unchangeable fields by name
    (``asdict`` and a rebuild on each rank would deep-copy your data and the object-store references)."""

    steps: int
    global_batch: int                  # B, cut into the ranks' shares b_i
    ratio: tuple | None                # one weight per rank; None: split by the ranks' measured speeds
    roles: tuple | None                # rank i's machine role (its node label); None: any node
    devices: tuple                     # per rank: "auto", "cuda", "mps", "cpu", …, resolved on its machine
    slowdowns: tuple                   # per rank: 1 = real speed, N = a simulated N× slower device
    model: object = "small"            # a built-in name or your factory
    lr: float = 1e-3
    seed: int = 0
    progress: bool = True              # rank 0 prints five lines of loss
    loss: object = None                # None: cross-entropy
    train_data: object = None          # your (x, y); train_mixed puts them in Ray's object store
    test_data: object = None
    train_samples: int | None = None   # a part of MNIST (None: all of it)
    test_samples: int | None = None
    label_key: str | None = None       # the node label that names a machine's role
    checkpoint_every: int | None = None  # a checkpoint every N steps too (None: only at the end)
    resume: object = None              # the checkpoint to go on from (checkpoint.read's), in Ray's object store
    check_every: int | None = None     # rank 0 tests the weights every N steps, untimed (None: at the end only)
    check_samples: int = 1000          # on this many test samples (core.train.held_out)

    @property
    def checkpoint_steps(self) -> range:
        """The steps after which rank 0 reports a checkpoint before the last one (the run's end)."""
        return range(self.checkpoint_every or self.steps, self.steps, self.checkpoint_every or self.steps)

    @property
    def check_steps(self) -> set:
        """The steps after which rank 0 checks the accuracy (the time to target): every ``check_every``
        and the last, as ``ParameterServerTraining.run_checked`` checks; none without ``check_every``."""
        return set(range(self.check_every, self.steps, self.check_every)) | {self.steps} if self.check_every else set()


def _per_rank(value, n: int, what: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise HetlabError(f"{what} {value!r} has {len(values)} entries for {n} ranks: give one per rank.")
    return values


def loop_config(steps, global_batch, ratio, roles, devices, slowdowns, model, lr, seed, train_samples,
                test_samples, progress, loss, train_data, test_data, checkpoint_every=None,
                check_every=None, check_samples=1000) -> LoopConfig:
    """``train_mixed``'s arguments checked (one line each, before anything starts) and turned into
    the ``LoopConfig`` every rank's loop reads. Your own data stays tensors under ``train_data`` /
    ``test_data``: the launch puts them in Ray's object store."""
    from hetlab.arithmetic.balance import check_proportions
    from hetlab.cluster.roles import role_label
    from hetlab.core.data import as_tensors
    from hetlab.core.models import as_factory, as_loss, check_model_and_loss

    n = len(roles) if roles else 2
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise HetlabError(f"steps must be a whole number ≥ 1, got {steps!r}.")
    if not isinstance(global_batch, int) or global_batch < n:
        raise HetlabError(f"global batch must be a whole number ≥ {n} (one sample per rank), got {global_batch!r}.")
    if isinstance(ratio, str) and ratio != "auto":
        raise HetlabError(f"ratio must be 'auto' or one number per rank like [3, 1], got {ratio!r}.")
    if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int)
                                         or checkpoint_every < 1):
        raise HetlabError(f"checkpoint_every must be a whole number of steps ≥ 1 (None: a checkpoint at the end "
                          f"only), got {checkpoint_every!r}.")
    for name, value in (("check_every", check_every), ("check_samples", check_samples)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise HetlabError(f"{name} must be a whole number ≥ 1, got {value!r}.")
    if check_every and train_data is not None and test_data is None:
        raise HetlabError("check_every= needs test_data= with your own train_data= (the checks test on it).")
    ratio_list = None if isinstance(ratio, str) else check_proportions(ratio, n)
    slow = [float(s) for s in _per_rank(slowdowns, n, "slowdowns")]
    if not all(1.0 <= s < float("inf") for s in slow):
        raise HetlabError(f"slowdowns must be finite and ≥ 1 (1 = real speed), got {slowdowns!r}.")
    for role in roles or ():
        role_label(role)  # an unknown role fails here, before anything starts
    factory, loss = as_factory(model), as_loss(loss)  # a bad model or loss fails here too
    if train_data is None and test_data is not None:
        raise HetlabError("test_data= needs train_data= too (without it the ranks train and test on MNIST).")
    if train_data is not None and (train_samples or test_samples):
        raise HetlabError("train_samples / test_samples pick a part of MNIST: with train_data= give "
                          "the samples you want instead.")
    own = [as_tensors(d) if d is not None else None for d in (train_data, test_data)]
    if own[0] is not None:
        if len(own[0][1]) < global_batch:
            raise HetlabError(f"{len(own[0][1])} training samples are fewer than one global batch of {global_batch}.")
        check_model_and_loss(factory, loss, *own[0])
    return LoopConfig(steps=steps, global_batch=global_batch, ratio=tuple(ratio_list) if ratio_list else None,
                      roles=tuple(roles) if roles else None, devices=tuple(_per_rank(devices, n, "devices")),
                      slowdowns=tuple(slow), model=factory, lr=lr, seed=seed, progress=progress,
                      loss=loss if loss is not nn.functional.cross_entropy else None,
                      train_data=own[0], test_data=own[1], train_samples=train_samples,
                      test_samples=test_samples, label_key=next(iter(role_label(roles[0]))) if roles else None,
                      checkpoint_every=checkpoint_every, check_every=check_every, check_samples=check_samples or 1000)


def check_cluster(roles: Sequence[str] | None, storage_path: str | None) -> None:
    """Fail in a second, not after Train's start-up timeout: Ray connected, a live node for every
    role, and rank 0 on this machine unless ``storage_path`` is a folder every node reaches."""
    import ray

    from hetlab.cluster.roles import ROLE_LABEL, live_nodes, role_label

    if not ray.is_initialized():
        raise HetlabError("Ray is not connected: call hetlab.cluster.connect() or start a PracticeCluster first.")
    alive = live_nodes()
    for role in roles or ():
        want = role_label(role)
        if not any(all((n.get("Labels") or {}).get(k) == v for k, v in want.items()) for n in alive):
            raise HetlabError(f"no live node has role {role!r} (the node label {ROLE_LABEL}={role}): join "
                              f"that machine with the `ray start` line `hetlab join` prints (it sets the "
                              f"label), or start the practice cluster (hetlab.cluster.practice.PracticeCluster).")
    if roles and storage_path is None:  # rank 0 writes the checkpoint: a temp dir here works only if it runs here
        here = ray.get_runtime_context().get_node_id()
        if here not in [n["NodeID"] for n in alive if (n.get("Labels") or {}).get(ROLE_LABEL) == roles[0]]:
            raise HetlabError(f"rank 0 runs on the {roles[0]!r} machine, not on this driver's, and Ray Train "
                              f"writes its checkpoint there: give storage_path= a folder every node can reach "
                              f"(NFS, SMB, a bucket), or run the driver on the {roles[0]!r} machine.")
