"""hetlab.core.devices. The CPU path runs for real. There is no CUDA card and no Apple GPU
on this machine, so the cuda and mps branches are tested by faking ONLY torch's
availability and property answers (monkeypatch); everything else is real."""
import math
import time
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hetlab import HetlabError
from hetlab.core import devices, train
from hetlab.core.models import make_model
from hetlab.core.simulate import SlowDevice


def test_cpu_is_always_there_and_real():
    assert devices.available()[-1] == "cpu"
    assert devices.best() in devices.available()
    info = devices.describe("cpu")
    assert info["kind"] == "cpu" and info["name"]


def test_a_speed_is_measured_for_real():
    sps = train.measure_speed(make_model("small"), "cpu", batch_size=32, steps=2).samples_per_s
    assert math.isfinite(sps) and sps > 0


def test_a_speed_warms_up_once_per_new_batch_size():
    """The first steps at a new shape are untimed (MPS compiles per shape); a shape already run
    in this process is timed straight away. Counted on the CPU, where the rule is the same."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 13))  # layers no other test times
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))

    def steps_run(batch_size, **kw):
        calls.clear()
        train.measure_speed(model, "cpu", batch_size=batch_size, steps=2, **kw)
        return len(calls)

    assert steps_run(23) == 7   # new shape: 5 warm-up (WARMUP_STEPS) + 2 timed
    assert steps_run(23) == 2   # seen: no extra cost
    assert steps_run(29) == 7   # another batch size is another shape
    assert steps_run(23, warmup=2) == 4  # an explicit count is always run
    assert steps_run(31, warmup=0) == 2 and steps_run(31) == 7  # warmup=0 warms nothing up


def test_timed_spans_hand_each_span_to_a_simulated_device():
    """The timer of a parameter-server worker alone: with a ``SlowDevice`` every span is timed on its own
    and handed to it (its wait follows)."""
    ran, slow, key = [], SlowDevice(1.0), ("cpu", "a step no other test times", 1)
    seconds = train.timed_spans(lambda: ran.append(1), "cpu", [1, 1, 1], slow, key)
    assert (len(seconds), len(ran), len(slow._recent[key])) == (3, 3, 3)   # 3 timed, 3 handed over
    assert train.timed_spans(lambda: ran.append(1), "cpu", [2]) and len(ran) == 5
    assert all(math.isfinite(s) for s in seconds)


def test_warm_up_runs_a_step_once_per_key():
    ran = []
    assert train.warm_up(("cpu", "a key no other test uses", 8), lambda: ran.append(8), "cpu") is True
    assert train.warm_up(("cpu", "a key no other test uses", 8), lambda: ran.append(8), "cpu") is False
    assert train.warm_up(("cpu", "a key no other test uses", 16), lambda: ran.append(16), "cpu") is True
    assert ran == [8, 16]
    small = make_model("small")
    assert train.shape_key(small, "cpu", 8) == train.shape_key(make_model("small", seed=3), "cpu", 8)
    assert train.shape_key(small, "cpu", 8) != train.shape_key(make_model("classic"), "cpu", 8)


@pytest.mark.parametrize("bad", ["tpu", "gpu0", "cuda:x", 3.5])
def test_unknown_device_names_are_one_line_errors(bad):
    with pytest.raises(HetlabError, match="unknown device"):
        devices.resolve(bad)


def test_bad_speed_arguments():
    with pytest.raises(HetlabError, match="at least 1"):
        train.measure_speed(make_model("small"), "cpu", batch_size=0)


def test_a_speed_times_the_optimizer_training_uses(monkeypatch):
    """hetlab trains with Adam (train.py, the parameter server), so that is what is timed.
    The optimizers are real, only counted on their way in."""
    made = []
    for name in ("Adam", "SGD"):
        real = getattr(torch.optim, name)
        monkeypatch.setattr(torch.optim, name, lambda params, _real=real, **kw: made.append(_real) or _real(params, **kw))
    train.measure_speed(make_model("small"), "cpu", batch_size=8, steps=1)
    assert [opt.__name__ for opt in made] == ["Adam"]


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend torch sees an RTX 4070 Ti (faked: no CUDA card exists here)."""
    props = SimpleNamespace(name="NVIDIA GeForce RTX 4070 Ti", total_memory=12 * 2**30, major=8, minor=9)
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: props)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: synced.append(dev))
    return synced


def test_cuda_branch(fake_cuda):
    assert devices.available()[0] == "cuda" and devices.best() == "cuda"
    info = devices.describe("cuda")
    assert info == {"device": "cuda", "kind": "cuda", "name": "NVIDIA GeForce RTX 4070 Ti",
                    "memory_gb": 12.0, "capability": "8.9"}
    devices.synchronize("cuda")
    assert len(fake_cuda) == 1, "timing on CUDA must wait for the card"


@pytest.fixture
def fake_mps(monkeypatch):
    """Pretend torch sees an Apple GPU (faked: this is not a Mac)."""
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16 * 2**30, raising=False)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append("mps"))
    return synced


def test_mps_branch(fake_mps):
    assert devices.available() == ["mps", "cpu"] and devices.best() == "mps"
    info = devices.describe("mps")
    assert info["kind"] == "mps" and "MPS" in info["name"] and info["memory_gb"] == 16.0
    devices.synchronize("mps")
    assert fake_mps == ["mps"]
    with pytest.raises(HetlabError, match="not available"):
        devices.resolve("cuda")


def test_a_simulated_slow_device_sleeps_the_typical_time_not_a_hiccup_again():
    """hetlab.core.simulate.SlowDevice (real sleeps, short ones): 3× slower sleeps 2 × the median
    of the last timings of the same work, so a one-off 40 ms hiccup is not slept again."""
    from hetlab.core.simulate import RECENT, SlowDevice

    slow = SlowDevice(3)
    slept = [slow.after(64, t) for t in (0.010, 0.010, 0.050, 0.010)]
    assert slept == pytest.approx([0.020, 0.020, 0.020, 0.020])
    t0 = time.perf_counter()
    assert slow.after(8, 0.002) == pytest.approx(0.004)  # other work, its own timings
    assert time.perf_counter() - t0 >= 0.004  # clock-ok: a lower bound (it really slept), not a cap
    for _ in range(RECENT):  # the device really got slower: the median follows within RECENT
        last = slow.after(64, 0.030)
    assert last == pytest.approx(0.060)
    assert SlowDevice(1).after(64, 0.5) == 0.0  # 1× is the device as it is: no sleep
