"""Single-device training on real MNIST (hetlab.core.models + hetlab.core.train)."""

import pytest
import torch

import hetlab.core.devices
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


def test_cosine_schedule_decays_the_rate_to_zero():
    """The schedule notebook 01 uses, on a real short run: from lr down to ~0, never up."""
    data = load_mnist("train").subset(640)
    cosine = train(make_model("small"), data, epochs=2, batch_size=64, schedule="cosine", progress=False)
    assert len(cosine.lr) == 20 and cosine.lr[0] == 1e-3 and cosine.lr[-1] < 1e-4
    assert all(a >= b for a, b in zip(cosine.lr, cosine.lr[1:]))
    constant = train(make_model("small"), data, epochs=1, batch_size=64, progress=False)
    assert constant.lr == [1e-3] * 10


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
