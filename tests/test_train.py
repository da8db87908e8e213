"""Single-device training on real MNIST (hetlab.core.models + hetlab.core.train)."""

import collections
import os
import statistics
import sys

import pytest
import torch

import hetlab.core.devices
import hetlab.core.train
from hetlab import HetlabError
from hetlab.core.data import load_mnist
from hetlab.core.models import count_params, make_model
from hetlab.core.train import evaluate, train


def test_models_are_reproducible_and_sized_as_documented():
    a, b = make_model("small", seed=3), make_model("small", seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert count_params(a) == 29066
    assert count_params(make_model("classic")) == 1199882
    assert make_model("small")(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(HetlabError, match="unknown model"):
        make_model("resnet")


@pytest.mark.slow   # tens of seconds: make test only
def test_quick_training_reaches_95_percent():
    """The quick-mode recipe used by notebook 01 in CI."""
    torch.set_num_threads(2)
    train_set, test_set = load_mnist("train").subset(12000), load_mnist("test").subset(2000)
    model = make_model("small")
    before = evaluate(model, test_set)
    hist = train(model, train_set, test_set, epochs=2, batch_size=64, progress=False)
    assert before < 0.2, "an untrained model guesses"
    assert hist.final_accuracy >= 0.95
    assert hist.loss[-1] < hist.loss[0] and hist.samples == 24000
    assert hist.samples_per_s > 0 and hist.seconds_compute > hist.seconds_batching


def test_bad_training_arguments():
    data = load_mnist("test").subset(100)
    with pytest.raises(HetlabError, match="batch size"):
        train(make_model(), data, batch_size=0, progress=False)
    with pytest.raises(HetlabError, match="epochs"):
        train(make_model(), data, epochs=0, progress=False)
    with pytest.raises(HetlabError, match="unknown schedule"):
        train(make_model(), data, schedule="linear", progress=False)


@pytest.mark.slow   # tens of seconds: make test only
def test_progress_bar_redraws_at_most_every_2_s(monkeypatch):
    """One redraw per step (tqdm's set_postfix refreshes by default) sent notebook 01's full run
    ~11,000 widget messages; nbval reads them only after the cell ends and lost the end. The bar's
    clock stands still here, so a redraw comes only from the training loop's own calls."""
    import io
    from tqdm import tqdm
    import hetlab.core.train
    out, bars = io.StringIO(), []

    def still_bar(total, desc, enabled):  # hetlab.progress_bar's tqdm, writing to out
        bar = tqdm(total=total, desc=desc, file=out, mininterval=hetlab.PROGRESS_EVERY_S)
        bar._time = lambda: bar.start_t   # its clock: never 2 s since the last redraw
        bars.append(bar)
        return bar

    monkeypatch.setattr(hetlab.core.train, "progress_bar", still_bar)
    data = load_mnist("train").subset(1280)
    train(make_model("small", seed=0), data, data.subset(64), epochs=2, batch_size=32, device="cpu")
    assert len(bars) == 1 and bars[0].n == 80                       # 2 epochs of 40 steps
    # the epoch ends (a postfix with the test accuracy) and the close, not one per step (80)
    assert 2 <= out.getvalue().count("\r") <= 4, repr(out.getvalue())


def test_evaluate_runs_where_the_model_is_unless_told_otherwise(monkeypatch):
    """On the desktop or the Mac ``devices.best()`` is a GPU while a freshly built model sits on
    the CPU: by default ``evaluate`` runs where the model is, and a device given moves the model
    there, as ``train`` does. FAKED: this box has no GPU, so ``best()`` names the ``meta``
    device instead, which would fail any computation sent to it."""
    monkeypatch.setattr(hetlab.core.devices, "best", lambda: "meta")
    test_set = load_mnist("test").subset(500)
    model = make_model("small", seed=0)
    accuracy = evaluate(model, test_set)                     # not sent to best() (meta would fail)
    assert next(model.parameters()).device.type == "cpu"     # it stayed on the CPU
    assert accuracy == evaluate(model, test_set, device="cpu")  # and counted there, as on the CPU given


def _count_host_reads(monkeypatch) -> collections.Counter:
    """Every read of a tensor's value into Python (``item``, ``tolist``, ``float()``, ``int()``, ``bool()``),
    by the file that asked. On a GPU each one waits for the device. Adam's own ``item()`` on its step
    counters is left out: PyTorch keeps those on the CPU (not fused, not capturable), no device wait."""
    counts = collections.Counter()
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def read(self, *args, _original=original, _name=name, **kw):
            caller = sys._getframe(1).f_code.co_filename
            if not caller.endswith(os.path.join("torch", "optim", "optimizer.py")):
                counts[f"{_name} in {os.path.basename(caller)}"] += 1
            return _original(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, name, read)
    return counts


def test_train_reads_the_device_a_few_times_an_epoch_not_every_step(monkeypatch):
    """The plain loop keeps its losses on the device: a GPU never waits for the host between steps
    (issue 44). 2 epochs of 32 steps: the losses read twice an epoch, the accuracy once."""
    data, test = load_mnist("train").subset(1024), load_mnist("test").subset(200)
    counts = _count_host_reads(monkeypatch)
    hist = train(make_model("small"), data, test, epochs=2, batch_size=32, progress=False)
    reads = sum(counts.values())
    assert len(hist.loss) == 64 and len(hist.test_accuracy) == 2
    assert reads <= 2 * 4, counts                      # a few an epoch, not one a step (32)
    assert hist.loss[-1] < hist.loss[0]


def test_timing_each_step_splits_batching_from_compute():
    """Notebook 01's lesson on where the time goes: ``timing=True`` (a device wait each step)."""
    data = load_mnist("train").subset(512)
    hist = train(make_model("small"), data, epochs=1, batch_size=64, progress=False, timing=True)
    assert hist.seconds_compute > hist.seconds_batching > 0 and len(hist.loss) == 8
    # the steady speed: the warm-up apart (its seconds beside it), the rest in windows; every step's
    # seconds are the run's training seconds, evaluation never among them
    warm = hist.steady
    assert (warm.warmup_steps, len(warm.windows), warm.steps) == (5, 3, 3)
    assert warm.warmup_s == pytest.approx(sum(hist.step_seconds[:5]))
    assert sum(hist.step_seconds) == pytest.approx(hist.seconds_batching + hist.seconds_compute)


def test_train_waits_for_the_device_only_where_a_window_ends(monkeypatch):
    """On a card ``train`` does not wait each step; it waits where the warm-up and each window end, so
    that a window's seconds hold its own work: a few waits a run, at the cuts ``steady`` makes."""
    waits = []
    monkeypatch.setattr(hetlab.core.train, "synchronize", lambda dev: waits.append(dev))
    train(make_model("small"), load_mnist("train").subset(800), epochs=1, batch_size=8, device="cpu", progress=False)
    assert len(waits) == 4   # after steps 5, 37, 68 and 100


def test_the_sweep_and_train_agree_on_a_device_speed():
    """One meaning of a device's speed: notebook 02's sweep (``measure_speed``) and ``train`` at the same
    batch, alternated (a busy machine slows both alike), medians within noise of each other. One thread:
    two threads on a machine whose cores other work keeps busy wait on each other, far noisier."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = load_mnist("train").subset(768)
    sweep, plain = [], []
    try:
        for _ in range(5):
            sweep.append(hetlab.core.train.measure_speed(make_model("small", seed=0), "cpu", 64, steps=12).samples_per_s)
            plain.append(train(make_model("small"), data, epochs=1, batch_size=64, device="cpu", progress=False).samples_per_s)
    finally:
        torch.set_num_threads(threads)
    ratio = statistics.median(p / s for p, s in zip(plain, sweep))
    assert 0.6 < ratio < 1.6, (plain, sweep)   # wide: a machine shared with other work is noisy


def _count_ops():
    """The benchmarks' counter of torch operations and host reads (a script beside them, not hetlab)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("opcount", Path(__file__).resolve().parents[1] / "benchmarks" / "opcount.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.count_ops


def test_the_op_counter_sees_forward_backward_and_host_reads():
    """benchmarks/opcount.py (benchmarks/train_loop.py's counter): the backward's operators are counted
    with the forward's, and each read to the host is counted by name."""
    count_ops = _count_ops()
    w = torch.ones(3, requires_grad=True)
    with count_ops() as c:
        loss = (w * 2).sum()
        loss.backward()
        loss.item()
        w.grad.tolist()
    assert c.ops["aten.mul"] >= 1 and c.ops["aten.sum"] == 1 and c.reads == {"item": 1, "tolist": 1}
    assert c.ops["aten.expand"] >= 1 or c.ops["aten.mul"] >= 2   # the backward's, not only the forward's
    assert c.per_step(1)[1] == 2


def test_train_issues_per_step_what_a_bare_loop_issues():
    """Issue 60: ``train``'s loop adds no torch operation to a step (on a card each is a launch); its only
    extras are the per-epoch loss reads. Four steps of one linear layer, counted, not timed."""
    from torch import nn
    count_ops = _count_ops()
    torch.manual_seed(0)
    x, y = torch.randn(512, 784), torch.randint(0, 10, (512,))
    with count_ops() as ours:
        train(nn.Linear(784, 10), (x, y), epochs=1, batch_size=128, progress=False)
    with count_ops() as bare:
        net = nn.Linear(784, 10)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        order = torch.randperm(512)
        xs, ys = x[order], y[order]
        for i in range(0, 512, 128):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(xs[i:i + 128]), ys[i:i + 128]).backward()
            opt.step()
    extra = ours.ops - bare.ops
    assert set(extra) <= {"aten.stack", "aten.detach", "aten._to_copy"}, extra   # the loss reads, once or twice
    assert sum(extra.values()) <= 2 * hetlab.core.train.LOSS_READS_PER_EPOCH, extra
    assert ours.reads["item"] == bare.reads["item"]   # Adam's step counts, in both
