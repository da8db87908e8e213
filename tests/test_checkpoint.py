"""Checkpoint files: atomic writes, weights-only loading, clear errors for bad files (notebook 08).

No Ray here: the state is the real one a parameter server holds (a ``Server`` object
used as a plain Python object, after a real Adam step on a real MNIST gradient).
The end-to-end bitwise resume through Ray is in test_ps.py.
"""
import pytest
import torch
from torch import nn

from hetlab import HetlabError
from hetlab.core.checkpoint import (FORMAT, latest_checkpoint, load_checkpoint, param_signature,
                               save_checkpoint)
from hetlab.core.data import load_mnist
from hetlab.core.models import make_model
from hetlab.ps.server import Server

OPTIONS = dict(mode="sync", lr=1e-3, optimizer="adam", max_staleness=2, transfer="fp32", seed=0)


def real_state(model="small"):
    server = Server(model, seed=0, lr=1e-3, mode="sync")
    data = load_mnist("test").subset(32, seed=0)
    net = make_model(model, seed=0)
    nn.functional.cross_entropy(net(data.normalized()), data.labels).backward()
    server.apply([torch.cat([p.grad.reshape(-1) for p in net.parameters()])], [1])
    return {"format": FORMAT, "model": model, "signature": param_signature(model), "options": OPTIONS,
            "step": 1, "server": server.state(), "workers": [{"name": "a"}], "batch_sizes": [32],
            "stream": {"cursor": 32, "pending": []}}


@pytest.fixture(scope="module")
def state():
    return real_state()


def test_roundtrip_is_exact_and_weights_only(state, tmp_path):
    path = save_checkpoint(state, tmp_path / "run" / "step-000001.pt")
    assert [p.name for p in path.parent.iterdir()] == ["step-000001.pt"]  # temp file renamed away
    back = load_checkpoint(path, model="small")  # torch.load(weights_only=True) inside
    assert torch.equal(back["server"]["weights"], state["server"]["weights"])
    assert torch.equal(back["server"]["optimizer"]["state"][0]["exp_avg_sq"],
                       state["server"]["optimizer"]["state"][0]["exp_avg_sq"])
    assert back["workers"] == state["workers"] and back["step"] == 1 and back["stream"] == state["stream"]
    assert back["options"] == OPTIONS  # the options, whole, as plain values
    torch.load(path, weights_only=True)


def test_save_replaces_atomically(state, tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(state, path)
    newer = dict(state, step=2)
    save_checkpoint(newer, path)
    assert load_checkpoint(path)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_latest_checkpoint(state, tmp_path):
    assert latest_checkpoint(tmp_path) is None
    for step in (5, 10, 15):
        save_checkpoint(dict(state, step=step), tmp_path / f"step-{step:06d}.pt")
    assert latest_checkpoint(tmp_path).name == "step-000015.pt"


def test_truncated_file_gives_one_line(state, tmp_path):
    path = save_checkpoint(state, tmp_path / "c.pt")
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(HetlabError, match="truncated or corrupted") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)


def test_garbage_and_foreign_files(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00\x01 this is not a checkpoint" * 100)
    with pytest.raises(HetlabError, match="truncated or corrupted"):
        load_checkpoint(garbage)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)  # a valid torch file, but not ours
    with pytest.raises(HetlabError, match="not a checkpoint this hetlab reads \\(no hetlab format"):
        load_checkpoint(foreign)
    with pytest.raises(HetlabError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_checkpoint_of_an_older_hetlab_is_refused_in_one_line(state, tmp_path):
    """Format 1 kept a data shard and position per worker; this hetlab keeps one cursor."""
    old = {k: v for k, v in state.items() if k != "stream"}
    old.update(format="hetlab-ps-checkpoint/1", shard_sizes=[16, 16],
               workers=[{"name": "a", "index": 0, "epoch": 0, "offset": 32}])
    path = save_checkpoint(old, tmp_path / "old.pt")
    with pytest.raises(HetlabError, match=r"not a checkpoint this hetlab reads \(hetlab-ps-checkpoint/1") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)


def test_checkpoint_of_another_model_is_refused(state, tmp_path):
    path = save_checkpoint(state, tmp_path / "small.pt")
    with pytest.raises(HetlabError, match="holds model 'small', not 'classic'"):
        load_checkpoint(path, model="classic")
    # a file claiming to be 'small' but holding another network's shapes
    forged = dict(state, signature=param_signature("classic"))
    save_checkpoint(forged, tmp_path / "forged.pt")
    with pytest.raises(HetlabError, match="different network"):
        load_checkpoint(tmp_path / "forged.pt")
    # right shapes, wrong number of weights (damaged)
    damaged = dict(state, server=dict(state["server"], weights=torch.zeros(10)))
    save_checkpoint(damaged, tmp_path / "damaged.pt")
    with pytest.raises(HetlabError, match="damaged"):
        load_checkpoint(tmp_path / "damaged.pt")
