"""Ray Train's TorchTrainer on a Mac and a CUDA desktop at once (notebook 07).

Ray Train was built for identical GPUs, and three of its defaults trip over a
mixed pair. This module works around each one:

* **One ScalingConfig for all ranks.** ``resources_per_worker`` is a single dict, so
  the Mac rank and the desktop rank must ask for the same thing. hetlab asks for one
  CPU each and pins rank *i* to its machine with ``label_selector=[{...}, {...}]``
  (one selector per rank, the ``hetlab-role`` node label).
* **GPU means CUDA, and GPU means NCCL.** Train maps the ``GPU`` resource to CUDA
  devices only, and picks the NCCL backend as soon as a rank requests a GPU. Ray 2.60
  reports an Apple Silicon Mac as ``GPU: 1`` too, so ``use_gpu=True`` would start NCCL
  on the Mac — which has no CUDA — and fail. NCCL cannot reach MPS, and gloo does not
  take MPS tensors. So: ``use_gpu=False``, the gloo backend, each rank picks its own
  device (``hetlab.devices.resolve("auto")`` on its own node), and gradients are
  all-reduced as one flat CPU buffer.
* **No GPU requested is not no GPU used.** A rank that asks for no GPU can still use
  the card: Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES`` alone for it (Ray issue 54868;
  ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`` restores the old way). Older Rays set it to
  ``""`` and hid CUDA from such a rank. The price: Ray does not know the rank uses the
  card, so it may schedule other GPU work next to it.

Unequal batches: rank *i* trains ``b_i`` samples of each global batch ``B`` (from a
given ratio, or from throughput each rank measures on its own device) and scales
its mean-loss gradient by ``b_i / B`` before a SUM all-reduce, so every rank applies
``Σ (b_i/B) g_i`` — exactly the gradient of the whole global batch — and the ranks'
weights stay identical (bitwise on equal hardware; CUDA and MPS may round Adam's
arithmetic differently in the last bit, so on the real pair they can drift apart
very slowly). Checkpoints: Train needs a ``storage_path`` that every node
can reach (NFS, a bucket) on a real multi-node cluster; tests use a local temp dir.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import nn

from hetlab import environment
from hetlab.errors import HetlabError
from hetlab.flat import flat_grad, set_flat_grad
from hetlab.simulate import SlowDevice, labelled

RENDEZVOUS_TIMEOUT_S = 60  # torch's default is 30 min: a blocked port would look like a hang
# Ray Train's own settings for a run of two machines (its driver passes them to its controller and
# ranks), unless you set them yourself. Measured with 20-step runs on the practice cluster, fit()
# took 16.2 s with Ray's defaults, 13.0 s with the first and 12.1 s with both (three runs each).
TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",   # default 2 s: the controller noticed the end late
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",    # watches for nodes being drained (cloud preemption):
}                                                  # none in a home pair; one actor fewer to start


def _gloo_on_node_address() -> str:
    """Make gloo use the interface holding this node's Ray address (``GLOO_SOCKET_IFNAME``).

    Left alone, gloo binds the address its hostname resolves to, which is 127.0.1.1 on a
    default Ubuntu install: the other machine would be told to connect to its own loopback.
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
    """Ray Train's torch backend for a mixed pair: gloo on each node's own address, the
    rendezvous on a pinned port (in the printed firewall rule), a short timeout."""
    import ray
    from ray._common.network_utils import build_address
    from ray.train.torch.config import (_set_torch_distributed_env_vars, _setup_torch_process_group,
                                        _TorchBackend)

    class PairBackend(_TorchBackend):
        def on_start(self, worker_group, backend_config):
            worker_group.execute(_gloo_on_node_address)
            master = worker_group.execute_single(0, ray.util.get_node_ip_address)
            url = f"tcp://{build_address(master, backend_config.port)}"
            worker_group.execute(_set_torch_distributed_env_vars)
            ray.get([worker_group.execute_single_async(
                i, _setup_torch_process_group, backend="gloo", world_rank=i,
                world_size=len(worker_group), init_method=url, timeout_s=backend_config.timeout_s)
                for i in range(len(worker_group))])

    return PairBackend


def train_env():
    """``TRAIN_ENV`` in this process's environment while a run starts (Ray Train reads it there),
    each variable only where you have not set it; afterwards the environment is as it was."""
    return environment(TRAIN_ENV, keep_set=True)


def torch_config(port: int | None = None, timeout_s: int = RENDEZVOUS_TIMEOUT_S):
    """``TorchConfig`` for the pair: gloo, rendezvous on ``port`` (default: hetlab's pinned
    ``Ports.train_rendezvous``), process-group timeout ``timeout_s`` instead of 30 minutes."""
    from ray.train.torch import TorchConfig

    from hetlab.commands import Ports

    @dataclass
    class PairTorchConfig(TorchConfig):
        port: int = Ports().train_rendezvous

        @property
        def backend_cls(self):
            return _pair_backend()

    return PairTorchConfig(backend="gloo", timeout_s=timeout_s, port=port or Ports().train_rendezvous)


def scaling_config(roles: Sequence[str] | None = ("desktop", "mac"), num_workers: int | None = None):
    """One CPU per rank, no GPU request (so gloo, not NCCL), rank *i* pinned to ``roles[i]``."""
    from ray.train import ScalingConfig

    if roles is None:
        return ScalingConfig(num_workers=num_workers or 2, use_gpu=False,
                             resources_per_worker={"CPU": 1})
    from hetlab.cluster import role_label

    return ScalingConfig(num_workers=len(roles), use_gpu=False, resources_per_worker={"CPU": 1},
                         label_selector=[role_label(r) for r in roles])


def rank_indices(step: int, batch_sizes: Sequence[int], rank: int, n_samples: int,
                 seed: int = 0) -> torch.Tensor:
    """Which samples rank ``rank`` trains at ``step``: its slice of the step's global batch.

    Every rank reads the same shuffled stream (``hetlab.data.stream_indices``, one
    permutation per epoch, as the parameter server does): step t is positions
    [t·B, (t+1)·B) of it and rank r takes its consecutive b_r of them, so together the
    ranks train each sample once per epoch, whatever the split.
    """
    from hetlab.data import stream_indices

    start = step * sum(batch_sizes) + sum(batch_sizes[:rank])
    return stream_indices(n_samples, seed, [(start, batch_sizes[rank])])


def weights_digest(model: nn.Module) -> str:
    """sha256 of all parameters' bytes: equal digests mean bitwise-equal weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class RankReport:
    """What one rank did: where it ran, its batch, and where its time went."""

    rank: int
    role: str
    label: str                # says "simulated" when slowdown > 1
    node_id: str
    device: str
    batch_size: int
    measured_samples_per_s: float
    samples: int
    compute_s: float          # forward, backward and optimizer step on the device
    simulated_s: float        # the simulated slowdown's sleep
    allreduce_s: float        # flattening, gloo all-reduce, and waiting for the other rank
    weights_sha256: str


@dataclass
class RayTrainResult:
    """A finished TorchTrainer run: per-rank reports, accuracy, timings, the checkpoint."""

    ranks: list[RankReport]
    accuracy: float
    loss: list[float]         # rank 0's global-batch loss per step
    fit_s: float              # TorchTrainer.fit() wall time, start-up included
    train_s: float            # the training loop alone (rank 0)
    allreduce_bytes_per_step: int
    model_name: str           # the network trained: a built-in name, or the factory's qualified name
    checkpoint_path: str | None = None
    steps: int = 0
    extra: dict = field(default_factory=dict)
    factory: object = field(default=None, repr=False)  # train_mixed's model= when it was a factory

    @property
    def weights_identical(self) -> bool:
        return len({r.weights_sha256 for r in self.ranks}) == 1

    @property
    def samples_per_s(self) -> float:
        return sum(r.samples for r in self.ranks) / self.train_s

    def model(self) -> nn.Module:
        """The trained weights from rank 0's checkpoint, in a fresh network (``factory`` when the
        run trained your own model, else the built-in ``model_name``) on the CPU."""
        from hetlab.models import make_model

        model = make_model(self.factory if self.factory is not None else self.model_name)
        model.load_state_dict(torch.load(os.path.join(self.checkpoint_path, "model.pt"),
                                         map_location="cpu", weights_only=True))
        return model


def train_loop(config: dict) -> None:
    """What every rank runs inside TorchTrainer: own device, own batch, weighted gloo all-reduce."""
    import ray
    import ray.train
    import torch.distributed as dist

    from hetlab.balance import split_batch
    from hetlab.data import load_mnist
    from hetlab.devices import resolve, synchronize, throughput
    from hetlab.models import make_model
    from hetlab.train import evaluate

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    labels = ray.get_runtime_context().get_node_labels()
    role = labels.get(config["label_key"], f"rank {rank}") if config["label_key"] else f"rank {rank}"
    if config["roles"] and role != config["roles"][rank]:
        raise HetlabError(f"rank {rank} landed on node role {role!r}, expected {config['roles'][rank]!r}.")
    device = resolve(config["devices"][rank])  # resolved here, on the rank's own machine
    slowdown = float(config["slowdowns"][rank])
    seed, global_batch = config["seed"], config["global_batch"]
    loss_fn = config["loss"] or nn.functional.cross_entropy
    if config["train_ref"] is not None:  # your own data: (x, y) put once in Ray's object store
        x, y = (t.to(device) for t in ray.get(config["train_ref"]))
    else:
        train = load_mnist("train")
        if config["train_samples"]:
            train = train.subset(config["train_samples"], seed=seed)
        x, y = train.normalized().to(device), train.labels.to(device)

    # Each rank measures its own device (a simulated slowdown divides its speed), and
    # every rank derives the same split from the gathered numbers.
    speed = throughput(make_model(config["model"], seed=seed), device,
                       batch_size=max(1, global_batch // world), steps=5, data=(x, y), loss=loss_fn) / slowdown
    speeds = [None] * world
    dist.all_gather_object(speeds, speed)
    sizes = split_batch(global_batch, config["ratio"] or speeds, world)
    share = sizes[rank] / global_batch

    model = make_model(config["model"], seed=seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    compute_s = simulated_s = allreduce_s = 0.0
    slow, losses = SlowDevice(slowdown), []
    t_start = time.perf_counter()
    for step in range(config["steps"]):
        idx = rank_indices(step, sizes, rank, len(y), seed).to(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        synchronize(device)
        t1 = time.perf_counter()
        simulated_s += slow.after(sizes[rank], t1 - t0)  # a simulated slower device sleeps
        t2 = time.perf_counter()
        # One flat CPU buffer: b_i/B × gradient, plus b_i/B × loss (the global loss for free).
        buf = torch.cat([flat_grad(model), loss.detach().float().cpu().view(1)]) * share
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        set_flat_grad(model, buf[:-1])
        t3 = time.perf_counter()
        opt.step()
        synchronize(device)
        losses.append(buf[-1].item())
        compute_s += (t1 - t0) + (time.perf_counter() - t3)
        allreduce_s += t3 - t2
        if config["progress"] and rank == 0 and (step + 1) % max(1, config["steps"] // 5) == 0:
            print(f"[hetlab rank 0] step {step + 1}/{config['steps']} loss {losses[-1]:.3f}")
    train_s = time.perf_counter() - t_start

    label = labelled(f"{role} · {device.type}", slowdown)  # the parameter server's label format
    if os.environ.get("HETLAB_REHEARSAL"):
        label += " (rehearsal host)"
    mine = RankReport(rank, role, label, ray.get_runtime_context().get_node_id(), str(device), sizes[rank],
                      speed, sizes[rank] * config["steps"], compute_s, simulated_s, allreduce_s,
                      weights_digest(model)).__dict__
    reports = [None] * world
    dist.all_gather_object(reports, mine)
    if rank != 0:
        ray.train.report({"rank": rank})
        return
    if config["test_ref"] is not None:
        accuracy = evaluate(model, ray.get(config["test_ref"]), device)
    elif config["train_ref"] is not None:
        accuracy = float("nan")  # your own training data, no test_data given
    else:
        test = load_mnist("test")
        if config["test_samples"]:
            test = test.subset(config["test_samples"], seed=seed)
        accuracy = evaluate(model, test, device)
    metrics = {"ranks": reports, "accuracy": accuracy, "train_s": train_s,
               "allreduce_bytes_per_step": 4 * buf.numel() * 2 * (world - 1) // world}
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(tmp, "model.pt"))
        with open(os.path.join(tmp, "loss.json"), "w") as f:
            json.dump(losses, f)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))


def _per_rank(value, n: int, what: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise HetlabError(f"{what} {value!r} has {len(values)} entries for {n} ranks: give one per rank.")
    return values


def _check_roles_present(roles: Sequence[str]) -> None:
    """Fail in a second, not after Train's start-up timeout, when no node carries a role."""
    import ray

    from hetlab.cluster import ROLE_LABEL, role_label

    alive = [n.get("Labels", {}) for n in ray.nodes() if n.get("Alive")]
    for role in roles:
        want = role_label(role)
        if not any(all(labels.get(k) == v for k, v in want.items()) for labels in alive):
            raise HetlabError(f"no live node has role {role!r} (the node label {ROLE_LABEL}={role}): join "
                              f"that machine with the `ray start` line `hetlab join` prints (it sets the "
                              f"label), or start the practice cluster (hetlab.practice.PracticeCluster).")


def _check_rank0_here(role: str) -> None:
    """Rank 0 writes the checkpoint into ``storage_path``: a temp dir of this machine works only
    when rank 0 runs here too."""
    import ray

    from hetlab.cluster import ROLE_LABEL

    here = ray.get_runtime_context().get_node_id()
    ours = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and (n.get("Labels") or {}).get(ROLE_LABEL) == role]
    if here not in ours:
        raise HetlabError(f"rank 0 runs on the {role!r} machine, not on this driver's, and Ray Train writes "
                          f"its checkpoint there: give storage_path= a folder every node can reach (NFS, "
                          f"SMB, a bucket), or run the driver on the {role!r} machine.")


# Ray Train retries a run whose controller failed, or whose node went away "expectedly" (a Ray
# stopped by SIGTERM counts as preempted), forever by default: with a rank's machine gone, its
# worker group can never start again, and fit() never returned (a Mac's node stopped mid-run,
# tests/test_raytrain.py). Here every failure ends the run, and explain_failure says why.
NO_RETRIES = dict(max_failures=0, controller_failure_limit=0, max_preemption_failures=0)

NETWORK_SIGNS = ("timed out", "connect timeout", "connection refused", "socket", "tcpstore",
                 "rendezvous", "process group")
GONE_SIGNS = ("node has died", "actor died", "worker health check failed",  # a rank's machine left
              "failed to initialize")                                          # ... as the run started


def explain_failure(text: str, port: int | None, timeout_s: int, roles: Sequence[str] = ()) -> str:
    """One line from the wall of text a failed ``TorchTrainer.fit()`` raises (``roles``: each
    rank's machine, to name the one that went away)."""
    from hetlab.commands import Ports

    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    hetlab_line = next((line for line in lines if "HetlabError" in line), None)
    if hetlab_line:
        return f"Ray Train run failed: {hetlab_line}"
    lowered = " ".join(lines).lower()
    gone = [int(rank) for rank, snippet in re.findall(r"\[Rank (\d+) Error Snippet\]:(.*?)(?=\[Rank \d+ Error|$)",
                                                     str(text), flags=re.S)
            if any(sign in snippet.lower() for sign in GONE_SIGNS)]
    network = any(sign in lowered for sign in NETWORK_SIGNS)
    if gone or (not network and any(sign in lowered for sign in GONE_SIGNS)):
        who = (", ".join(f"the {roles[r]} (rank {r})" if r < len(roles) else f"rank {r}" for r in gone)
               or "a rank's machine")
        return (f"Ray Train run failed: {who} went away (its Ray node or a rank's process died: a Mac "
                f"asleep, a lost link). A Ray Train run needs every rank: bring that machine back "
                f"(`hetlab.cluster.node_table()` shows it) and run again; the parameter server goes on "
                f"without it (notebook 08).")
    if network:
        port = port or Ports().train_rendezvous
        return (f"Ray Train's ranks could not connect to each other within {timeout_s} s: open TCP {port} "
                f"(the rendezvous, on rank 0's machine) and the ephemeral ports gloo uses to the other "
                f"machine's IP: `hetlab head` / `hetlab join` print the rule (Ray Train only).")
    return f"Ray Train run failed: {lines[0] if lines else 'no reason given'}"


def train_mixed(steps: int = 100, global_batch: int = 128, ratio: str | Sequence[float] = "auto",
                roles: Sequence[str] | None = ("desktop", "mac"), devices="auto", slowdowns=1.0,
                model="small", lr: float = 1e-3, seed: int = 0,
                train_samples: int | None = None, test_samples: int | None = None,
                storage_path: str | None = None, progress: bool = True,
                rendezvous_port: int | None = None,
                timeout_s: int = RENDEZVOUS_TIMEOUT_S, loss=None, train_data=None,
                test_data=None) -> RayTrainResult:
    """Train on every role's machine with one TorchTrainer run; returns what each rank did.

    ``ratio="auto"`` splits the global batch by the throughput each rank measures on
    its own device; ``[3, 1]`` gives the split directly. ``slowdowns`` (per rank, ≥ 1)
    makes a rank a *simulated* slower device. ``storage_path`` must be reachable by every
    node on a real multi-node cluster (NFS, a bucket); default: a temp dir on this machine,
    allowed only when rank 0 (the one that writes the checkpoint) runs on this machine.
    The ranks meet on ``rendezvous_port`` of rank 0's node (default ``Ports.train_rendezvous``,
    in the printed firewall rule) and give up after ``timeout_s`` with a one-line reason.
    Your own model and data: ``model=`` a factory, ``loss=``, ``train_data=`` / ``test_data=``
    as tensors ``(x, y)`` or any map-style torch Dataset (default: MNIST, ``train_samples`` …);
    without ``test_data`` the result's accuracy is NaN.
    """
    import ray
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    from hetlab.balance import check_weights
    from hetlab.cluster import role_label

    n = len(roles) if roles else 2
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise HetlabError(f"steps must be a whole number ≥ 1, got {steps!r}.")
    if not isinstance(global_batch, int) or global_batch < n:
        raise HetlabError(f"global batch must be a whole number ≥ {n} (one sample per rank), got {global_batch!r}.")
    if isinstance(ratio, str) and ratio != "auto":
        raise HetlabError(f"ratio must be 'auto' or one number per rank like [3, 1], got {ratio!r}.")
    ratio_list = None if isinstance(ratio, str) else check_weights(ratio, n)
    slow = [float(s) for s in _per_rank(slowdowns, n, "slowdowns")]
    if not all(1.0 <= s < float("inf") for s in slow):
        raise HetlabError(f"slowdowns must be finite and ≥ 1 (1 = real speed), got {slowdowns!r}.")
    for role in roles or ():
        role_label(role)  # an unknown role fails here, before anything starts
    from hetlab.data import as_tensors
    from hetlab.models import as_factory, as_loss, check_model_and_loss, model_label
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
    if not ray.is_initialized():
        raise HetlabError("Ray is not connected: call hetlab.cluster.connect() or start a PracticeCluster first.")
    if roles:
        _check_roles_present(roles)
        if storage_path is None:
            _check_rank0_here(roles[0])
    config = {"steps": steps, "global_batch": global_batch, "ratio": ratio_list,
              "roles": list(roles) if roles else None, "devices": _per_rank(devices, n, "devices"),
              "slowdowns": slow, "model": factory, "lr": lr, "seed": seed, "progress": progress,
              "loss": loss if loss is not nn.functional.cross_entropy else None,
              "train_ref": ray.put(own[0]) if own[0] is not None else None,
              "test_ref": ray.put(own[1]) if own[1] is not None else None,
              "train_samples": train_samples, "test_samples": test_samples,
              "label_key": next(iter(role_label(roles[0]))) if roles else None}
    storage_path = storage_path or tempfile.mkdtemp(prefix="hetlab-raytrain-")
    trainer = TorchTrainer(train_loop, train_loop_config=config,
                           torch_config=torch_config(rendezvous_port, timeout_s),
                           scaling_config=scaling_config(roles, n),
                           run_config=RunConfig(storage_path=storage_path,
                                                failure_config=FailureConfig(**NO_RETRIES),
                                                name=f"hetlab-{time.strftime('%Y%m%d-%H%M%S')}"))
    t0 = time.perf_counter()
    try:
        with train_env():
            result = trainer.fit()
    except Exception as e:  # Train wraps worker errors; keep their one-line reason
        raise HetlabError(explain_failure(str(e), rendezvous_port, timeout_s, roles or ())) from None
    fit_s = time.perf_counter() - t0
    m, path = result.metrics, result.checkpoint.path
    with open(os.path.join(path, "loss.json")) as f:
        loss = json.load(f)
    return RayTrainResult(ranks=[RankReport(**r) for r in m["ranks"]], accuracy=m["accuracy"],
                          loss=loss, fit_s=fit_s, train_s=m["train_s"],
                          allreduce_bytes_per_step=m["allreduce_bytes_per_step"],
                          checkpoint_path=path, steps=steps, model_name=model_label(model),
                          factory=None if isinstance(model, str) else factory)
