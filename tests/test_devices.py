"""hetlab.devices. The CPU path runs for real. There is no CUDA card and no Apple GPU
on this machine, so the cuda and mps branches are tested by faking ONLY torch's
availability and property answers (monkeypatch); everything else is real."""
import math
from types import SimpleNamespace

import pytest
import torch

from hetlab import HetlabError, devices
from hetlab.models import make_model


def test_cpu_is_always_there_and_real():
    assert devices.available()[-1] == "cpu"
    assert devices.best() in devices.available()
    info = devices.describe("cpu")
    assert info["kind"] == "cpu" and info["name"]


def test_throughput_is_measured_for_real():
    sps = devices.throughput(make_model("small"), "cpu", batch_size=32, steps=2, warmup=1)
    assert math.isfinite(sps) and sps > 0


@pytest.mark.parametrize("bad", ["tpu", "gpu0", "cuda:x", 3.5])
def test_unknown_device_names_are_one_line_errors(bad):
    with pytest.raises(HetlabError, match="unknown device"):
        devices.resolve(bad)


def test_bad_throughput_arguments():
    with pytest.raises(HetlabError, match="at least 1"):
        devices.throughput(make_model("small"), "cpu", batch_size=0)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend torch sees an RTX 4070 Ti (faked: no CUDA card exists here)."""
    props = SimpleNamespace(name="NVIDIA GeForce RTX 4070 Ti", total_memory=12 * 2**30, major=8, minor=9)
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: props)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: synced.append(dev))
    return synced


def test_cuda_branch(fake_cuda):
    assert devices.available()[0] == "cuda" and devices.best() == "cuda"
    info = devices.describe("cuda")
    assert info == {"device": "cuda", "kind": "cuda", "name": "NVIDIA GeForce RTX 4070 Ti",
                    "memory_gb": 12.0, "capability": "8.9", "bf16": True, "fp16": True}
    devices.synchronize("cuda")
    assert len(fake_cuda) == 1, "timing on CUDA must wait for the card"


@pytest.fixture
def fake_mps(monkeypatch):
    """Pretend torch sees an Apple GPU (faked: this is not a Mac)."""
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(devices, "_mps_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16 * 2**30, raising=False)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append("mps"))
    return synced


def test_mps_branch(fake_mps):
    assert devices.available() == ["mps", "cpu"] and devices.best() == "mps"
    info = devices.describe("mps")
    assert info["kind"] == "mps" and "MPS" in info["name"] and info["memory_gb"] == 16.0
    assert info["fp16"] and info["bf16"]
    devices.synchronize("mps")
    assert fake_mps == ["mps"]
    with pytest.raises(HetlabError, match="not available"):
        devices.resolve("cuda")
