"""A GPU still held by another driver (an earlier notebook's kernel) fails at once, in one line.

The practice "desktop" node is started with ``accounted_gpus={"desktop": 1}``: Ray COUNTS one
GPU there although this CPU-only box has none. That is honest for a scheduling test — Ray
accounts GPUs as numbers, and nothing here runs on a GPU (``device="auto"`` still resolves to
the CPU inside the worker, since torch finds no CUDA). The holders are real Ray actors: one from
another driver process (a stand-in for another notebook's kernel), one from this test's driver.
"""
import os
import subprocess
import sys
import time

import pytest
import ray

from hetlab import HetlabError
from hetlab.core import devices
from hetlab.cluster import roles as gpus
from hetlab.cluster.roles import live_nodes, placement
from hetlab.core.data import load_mnist
from hetlab.cluster.practice import PracticeCluster
from hetlab.ps import ParameterServerTraining, WorkerSpec
from hetlab.ps.specs import check_spec

# Another driver that takes the desktop's GPU and keeps it until its stdin closes.
HOLDER = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
@ray.remote(num_cpus=0, num_gpus=1, resources={"hetlab-role:desktop": 0.001})
class Holder:
    def ping(self):
        return "ok"
h = Holder.remote()
ray.get(h.ping.remote())
print("holding", flush=True)
sys.stdin.read()
"""
WORKERS = [WorkerSpec("desktop", role="desktop", device="auto")]


@ray.remote(num_cpus=0)
class Holder:
    def ping(self):
        return "ok"


@pytest.fixture(scope="module")
def practice():
    with PracticeCluster(("desktop",), accounted_gpus={"desktop": 1}) as pc:
        yield pc


@pytest.fixture(autouse=True)
def short_release_wait(monkeypatch):
    """Wait 2 s, not 10, for a GPU released a moment ago (seen here: free 0.1 s after ray.kill)."""
    monkeypatch.setattr(gpus, "RELEASE_WAIT_S", 2.0)


@pytest.fixture(scope="module")
def data():
    return load_mnist("train").subset(600, seed=0)


def wait_for_free_gpus(expected, timeout=30):
    nodes = [n["NodeID"] for n in live_nodes("desktop") if n["Resources"].get("GPU", 0) >= 1]
    deadline = time.monotonic() + timeout
    while gpus.gpus_available(nodes) != expected:  # Ray's GCS view lags the actor by ~100 ms
        assert time.monotonic() < deadline, f"GPU availability never became {expected}"
        time.sleep(0.1)


def test_gpu_held_by_another_driver_fails_at_once_then_frees(practice, data):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, practice.address], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "holding"
        wait_for_free_gpus(0)
        with pytest.raises(HetlabError) as info:
            ParameterServerTraining(WORKERS, data, progress=False)
        message = str(info.value)
        # hetlab's own check answers (after RELEASE_WAIT_S), not the worker's start-up timeout
        # (worker_timeout_s), whose message would differ
        assert message.startswith("worker 'desktop' needs the GPU on the desktop machine, but another actor "
                                  "holds it")
        assert "ray list actors --filter state=ALIVE" in message and "\n" not in message
    finally:
        proc.stdin.close()  # the other driver exits; Ray frees its actor's GPU
        proc.wait(timeout=60)
    # Freed a moment ago: the new training waits the few seconds Ray takes, then starts.
    with ParameterServerTraining(WORKERS, data, progress=False) as run:
        assert run.info[run.names[0]]["device"] == devices.best()  # Ray counted a GPU; torch's best here (CI: cpu)
        assert len(run.run(1)) == 1


def test_gpu_held_by_this_driver_and_too_few_gpus(practice, data):
    holder = Holder.options(**placement("desktop", gpu=True)).remote()
    ray.get(holder.ping.remote(), timeout=60)
    wait_for_free_gpus(0)
    with pytest.raises(HetlabError, match=r"another actor holds it: this kernel's earlier training "
                                          r"\(training.shutdown\(\), or restart this kernel\)"):
        ParameterServerTraining(WORKERS, data, progress=False)
    ray.kill(holder)  # asynchronous: Ray frees the GPU a moment later
    killed = time.monotonic()
    wait_for_free_gpus(1)
    print(f"GPU free again {time.monotonic() - killed:.2f} s after ray.kill")
    two = [WorkerSpec("a", role="desktop", device="cuda"), WorkerSpec("b", role="desktop", device="auto")]
    with pytest.raises(HetlabError, match=r"workers \['a', 'b'\] each ask for a GPU on the desktop "
                                          r"machine, which has 1: give all but 1 of them device='cpu'"):
        ParameterServerTraining(two, data, progress=False)  # hetlab's count, before Ray queues the actors


def test_cuda_index_spec_check():
    check_spec(WorkerSpec("w", device="cuda:1"))
    with pytest.raises(HetlabError, match="unknown device 'cuda:x'"):
        check_spec(WorkerSpec("w", device="cuda:x"))
