"""Ray Train on a real two-node practice cluster: unequal batches, hetlab's exchange on CPU copies,
identical weights, rank 0's checkpoint.

No device is mocked: both practice nodes train on this CPU; the "mac" rank is a
*simulated* slower device (it sleeps), and says so in its label.
"""
import os
import time

import pytest
import torch
from torch import nn

from hetlab import HetlabError
from hetlab.raytrain import config as raytrain_config
from hetlab.core.data import load_mnist
from hetlab.core.models import make_model
from hetlab.core.flat import flat_grad, set_flat_grad
from hetlab.raytrain.config import scaling_config, torch_config
from hetlab.raytrain.mixed import explain_failure, remove_groups_since, train_mixed
from hetlab.raytrain.loop import rank_indices, weights_digest
from hetlab.core.train import evaluate

STEPS, BATCH, SPLIT = 60, 64, [48, 16]


# --- pure parts, no Ray ----------------------------------------------------------------

def _grads_of(model, x, y):
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    return flat_grad(model)


def test_weighted_sum_of_rank_gradients_is_the_global_batch_gradient():
    data = load_mnist("train").subset(100, seed=1)
    x, y = data.normalized(), data.labels
    model = make_model("small", seed=0)
    full = _grads_of(model, x, y)
    g_a, g_b = _grads_of(model, x[:80], y[:80]), _grads_of(model, x[80:], y[80:])
    weighted = 0.8 * g_a + 0.2 * g_b
    assert torch.allclose(weighted, full, atol=1e-6)
    plain_mean = (g_a + g_b) / 2               # what an unweighted all-reduce would apply
    assert not torch.allclose(plain_mean, full, atol=1e-4)


def test_flat_grad_round_trip():
    model = make_model("small", seed=0)
    data = load_mnist("train").subset(8, seed=0)
    flat = _grads_of(model, data.normalized(), data.labels)
    assert flat.dtype == torch.float32 and flat.device.type == "cpu"
    set_flat_grad(model, flat * 2)
    assert torch.equal(flat_grad(model), flat * 2)


def test_rank_indices_cover_each_global_batch_once():
    sizes = [5, 2]
    for step in (0, 1, 13, 15):  # steps 15 and on are in the second epoch of 100 samples
        a = rank_indices(step, sizes, 0, 100, seed=3)
        b = rank_indices(step, sizes, 1, 100, seed=3)
        assert len(a) == 5 and len(b) == 2
        assert not set(a.tolist()) & set(b.tolist())
    first_epoch = torch.cat([rank_indices(s, sizes, r, 100, seed=3)
                             for s in range(100 // 7) for r in (0, 1)])
    assert len(set(first_epoch.tolist())) == len(first_epoch) == 98


def test_rank_i_and_parameter_server_worker_i_train_the_same_samples():
    """One cut of the global batch: the parameter server's step (its stream's next B positions,
    ``split_spans``, what its worker i reads) and Ray Train's rank i give the same samples, step for
    step, across an epoch's end (100 samples, 7 a step) and with unequal shares."""
    from hetlab.core.stream import Stream, split_spans
    from hetlab.ps import WorkerSpec
    from hetlab.ps.worker import Worker

    sizes, data = [5, 2], (torch.zeros(100, 1, 28, 28), torch.arange(100) % 10)
    workers = [Worker(WorkerSpec(f"w{i}", device="cpu"), data, "small", seed=3) for i in range(2)]
    stream = Stream()
    for step in range(20):
        shares = split_spans(stream.take(sum(sizes)), sizes)     # the parameter server's sync step
        for rank, (worker, share) in enumerate(zip(workers, shares)):
            assert torch.equal(worker._indices(share), rank_indices(step, sizes, rank, 100, seed=3))


def test_the_loop_reads_one_frozen_checked_config():
    """``loop_config`` checks ``train_mixed``'s arguments into one ``LoopConfig``, per-rank values
    one per rank; no rank can change what the others read."""
    import dataclasses

    cfg = raytrain_config.loop_config(10, 64, [48, 16], ("desktop", "mac"), "auto", [1, 2], 0, None, None)
    assert (cfg.devices, cfg.slowdowns, cfg.batch_sizes) == (("auto", "auto"), (1.0, 2.0), (48, 16))
    assert cfg.roles == ("desktop", "mac")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 5


def test_scaling_config_avoids_the_gpu_and_nccl_traps():
    cfg = scaling_config(("desktop", "mac"))
    assert cfg.num_workers == 2 and not cfg.use_gpu
    assert cfg.resources_per_worker == {"CPU": 1}          # no "GPU": Train would pick NCCL
    assert cfg.label_selector == [{"hetlab-role": "desktop"}, {"hetlab-role": "mac"}]


def test_torch_config_has_a_short_timeout_and_an_exchange_that_crosses_systems():
    cfg = torch_config()
    assert cfg.backend == "hetlab" and cfg.timeout_s == 60   # not a 30-min hang


def test_a_blocked_rendezvous_is_explained_in_one_line():
    wall = ("ray.train.ControllerError: Training failed due to controller error:\n"
            "  ray::execute._setup_torch_process_group() ...\n"
            "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms "
            "while trying to connect to (10.77.0.1, 6386).")
    line = explain_failure(wall)
    assert "\n" not in line and "6386" in line and "within 60 s" in line and "hetlab head" in line
    assert explain_failure("ValueError: HetlabError: no live node has role 'x'").endswith(
        "HetlabError: no live node has role 'x'")
    busy = ("ray.train.ControllerError: Training failed due to controller error:\nThe worker group startup "
            "timed out after 60.0 seconds waiting for 1 workers.")
    assert "did not get their CPUs in time" in explain_failure(busy)     # not the firewall
    waited = wall.replace("client socket has timed out", "Wait timeout for key(s)")
    assert "6386" in explain_failure(waited, ("desktop", "mac"))      # the port
    starting = ("ray.train.ControllerError: Training failed due to controller error:\n"
                "At least one of the worker actors failed to initialize.\n"
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    assert explain_failure(starting).startswith("Ray Train run failed: a rank's machine went away")


@pytest.mark.parametrize("kwargs", [dict(steps=0), dict(batch_sizes=[64, 32, 32]), dict(batch_sizes="fast"),
                                    dict(batch_sizes=[96, 16]), dict(batch_sizes=[129, -1]),
                                    dict(slowdowns=[1, 0.5]), dict(global_batch=1),
                                    dict(roles=("desktop", "laptop"))])
def test_bad_input_is_one_line_before_anything_starts(kwargs):
    """Checked before Ray is even asked for: no Ray runs in this test, and the line names the
    input, not Ray's absence ("needs the cluster" would mean the checks came too late)."""
    import ray

    ray.shutdown()  # no driver here (module fixtures of other files are gone; this file's start later)
    with pytest.raises(HetlabError) as err:
        train_mixed(**kwargs)
    assert "\n" not in str(err.value) and "needs the cluster" not in str(err.value)


def test_without_ray_it_says_so_in_one_line():
    import ray

    ray.shutdown()
    with pytest.raises(HetlabError, match="^Ray Train needs the cluster"):
        train_mixed(steps=1)


# --- one real TorchTrainer run on a two-node practice cluster --------------------------

@pytest.fixture(scope="module")
def practice():
    from hetlab.cluster.practice import PracticeCluster

    with PracticeCluster(roles=("desktop", "mac")) as pc:
        yield pc


@pytest.fixture(scope="module")
def run(practice, tmp_path_factory):
    """One TorchTrainer fit on a part of MNIST, the "mac" rank a simulated 2× slower device."""
    return train_mixed(steps=STEPS, global_batch=BATCH, batch_sizes=SPLIT, slowdowns=[1, 2], train_samples=2000,
                       test_samples=400, storage_path=str(tmp_path_factory.mktemp("raytrain")))


def test_each_rank_ran_on_its_own_node_with_its_own_batch(run, practice):
    desktop, mac = run.ranks
    assert (desktop.role, mac.role) == ("desktop", "mac")
    assert desktop.node_id == practice.node_id("desktop")
    assert mac.node_id == practice.node_id("mac")
    assert (desktop.batch_size, mac.batch_size) == (48, 16)
    assert mac.samples == 16 * STEPS
    assert "simulated" in mac.label and "simulated" not in desktop.label
    assert mac.simulated_s > 0 and desktop.simulated_s == 0


def test_both_ranks_end_with_identical_weights(run):
    assert run.weights_identical
    assert run.ranks[0].weights_sha256 == weights_digest(run.model())


def test_the_run_used_hetlabs_ray_train_settings(run, practice):
    """TRAIN_ENV reached Ray Train's controller: no preemption watcher was started (it would have
    been, by default); and this process's environment is as before the run."""
    from ray._private import state

    classes = {a["ActorClassName"] for a in state.actors().values()}
    assert "TrainController" in classes and "PreemptionWatcher" not in classes
    assert not any(k in os.environ for k in raytrain_config.TRAIN_ENV)


def test_train_env_keeps_your_own_values(monkeypatch):
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "3")
    monkeypatch.delenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", raising=False)
    with raytrain_config.train_env():
        assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "3"
        assert os.environ["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] == "0"
    assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "3"
    assert "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER" not in os.environ


def test_it_learns_and_the_checkpoint_holds_the_trained_weights(run):
    assert run.accuracy > 0.7                               # chance is 0.1
    assert sum(run.loss[-10:]) < 0.7 * sum(run.loss[:10])     # from ln 10 = 2.3
    # The checkpoint holds the trained weights: they score the same on the same test set.
    assert evaluate(run.model(), load_mnist("test").subset(400, seed=0)) == pytest.approx(run.accuracy)
    t = run.technique()                                     # the report's row: evaluated once, at the end
    assert (t["split"], t["steps"], t["checks"], t["accuracy"]) == (SPLIT, STEPS, 0, run.accuracy)


def test_rank0_elsewhere_needs_a_shared_storage_path(run, practice):
    # The driver is on the desktop node; rank 0 on the mac would write its checkpoint there.
    with pytest.raises(HetlabError, match="storage_path"):
        train_mixed(steps=1, roles=("mac", "desktop"))


def test_a_failed_run_removes_only_the_placement_groups_made_since_it_started(practice):
    """What train_mixed does after a failure (Ray Train can leave its ranks' group holding their
    CPUs): the groups made since the run started go, one made before it stays."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    kept = placement_group([{"CPU": 0.01}])
    try:
        before = set(ray.util.placement_group_table())
        left = placement_group([{"CPU": 0.01}])
        remove_groups_since(before)
        table = ray.util.placement_group_table()
        assert table[left.id.hex()]["state"] == "REMOVED" and table[kept.id.hex()]["state"] != "REMOVED"
    finally:
        remove_placement_group(kept)


def test_a_rank_lost_mid_run_is_named_in_one_line(run, practice):
    """The mac node goes away while both ranks train (its raylet and processes stop, as when
    a Mac's Ray stops): the run fails at once, and the line says which machine went and what to
    do, instead of Ray Train's first line ("Training failed due to worker errors:" or "... due to
    controller error:"). Ray Train's default retries had waited for it for ever (1 run in 3)."""
    import threading

    from ray._private import state

    def take_mac_away():
        """Once both ranks' processes are up (they measure, then train), the mac node goes."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "error" not in outcome and sum(
                a["ActorClassName"] == "RayTrainWorker" and a["State"] == "ALIVE" for a in state.actors().values()) < 2:
            time.sleep(0.2)
        practice.remove_node("mac")

    outcome: dict = {}

    def fit():
        try:
            outcome["result"] = train_mixed(steps=100_000, train_samples=6000, test_samples=500)
        except Exception as exc:  # noqa: BLE001 - checked below
            outcome["error"] = exc

    remover, runner = threading.Thread(target=take_mac_away), threading.Thread(target=fit, daemon=True)
    remover.start()
    runner.start()
    try:
        remover.join()
        runner.join(timeout=180)  # Ray Train's default retries waited for the lost rank for ever
        assert not runner.is_alive(), "fit() did not return within 180 s of the mac node going away"
    finally:
        practice.add_node("mac")
    assert isinstance(outcome.get("error"), HetlabError), outcome
    line = str(outcome["error"])
    # mid-run, rank 1's error names it; while the worker group starts, Ray Train's names no rank
    assert "\n" not in line and line.startswith(("Ray Train run failed: the mac (rank 1) went away",
                                                 "Ray Train run failed: a rank's machine went away")), line
    assert "bring that machine back" in line


def test_missing_role_fails_before_ray_train_starts(run, practice):
    """Last in this module: it takes the mac node away. hetlab's own check answers, before Ray
    Train starts a controller (which would wait for the node until its start-up timeout)."""
    from ray._private import state

    def controllers() -> int:
        return sum(a["ActorClassName"] == "TrainController" for a in state.actors().values())

    practice.remove_node("mac")
    before = controllers()
    with pytest.raises(HetlabError, match="no live node has the role 'mac'"):
        train_mixed(steps=1)
    assert controllers() == before
