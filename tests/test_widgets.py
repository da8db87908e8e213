"""hetlab.views.widgets.SplitTuner, headless: set the slider, click the buttons, against a REAL
ParameterServerTraining on a real local Ray with real MNIST (one worker simulated 4× slower)."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import ray  # noqa: E402

from hetlab.cluster.connecting import connect  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.ps import ParameterServerTraining, Resplit, WorkerSpec  # noqa: E402
from hetlab.views.widgets import SplitTuner  # noqa: E402

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def local_ray():
    connect("local", num_cpus=2)  # a local Ray (retries Ray's fixed start-up window on a busy box)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def training(local_ray):
    workers = [WorkerSpec("desktop", device="cpu"), WorkerSpec("mac", device="cpu", slowdown=4)]
    run = ParameterServerTraining(workers, load_mnist("train").subset(3000, seed=0), progress=False)
    yield run
    run.shutdown()


def test_slider_run_auto_and_errors_against_real_training(training):
    tuner = SplitTuner(training, global_batch=64, steps=2, auto_rounds=2, auto_steps=2)
    assert len(tuner.sliders) == 1 and "desktop" in tuner.sliders[0].description
    assert tuner.batch_sizes() == [32, 32]  # starts from the training's current (equal) split
    tuner.sliders[0].value = 51             # the desktop's batch: the mac takes the rest
    assert tuner.batch_sizes() == [51, 13] and "<b>51</b>" in tuner.split_label.value

    step_before, split_before = training.step, tuple(training.batch_sizes)
    tuner.run_button.click()
    assert tuner.error is None
    assert training.step == step_before + 2
    assert training.events[-1] == Resplit(step_before, split_before, (51, 13), "widget")  # the split's one writer
    run = tuner.runs[-1]
    assert [r.batch_size for r in run["records"]] == [51, 13, 51, 13]
    assert run["samples_per_s"] > 0 and 0 < run["efficiency"] <= 1.05
    assert "samples/s" in tuner.result_label.value and "∝ this run's speeds" in tuner.recommended_label.value
    assert tuner.fitted() is None and "predicted" not in tuner.split_label.value   # one split: nothing to fit
    assert bytes(tuner.plot.value[:4]) == PNG
    assert any("simulated" in t.get_text() for t in tuner.figure.legends[0].get_texts())
    assert any("simulated" in t.get_text() for t in tuner.figure.axes[0].get_yticklabels())

    tuner.auto_button.click()
    assert tuner.error is None and tuner.tune_result is not None
    result = tuner.tune_result
    assert sum(result.batch_sizes) == 64 and result.history[0].batch_sizes == [32, 32]
    assert tuner.batch_sizes() == result.batch_sizes and tuner.sliders[0].value == result.batch_sizes[0]
    assert "auto-tuned" in tuner.recommended_label.value

    tuner.set_batch_sizes([24, 40])  # far from 51:13 (a fit from splits a few samples apart is noise)
    tuner.run_button.click()  # a second run: the samples/s panel now has two points
    assert len(tuner.runs) == 2
    # two splits: each worker's step fitted (fixed + b / speed), a prediction for the slider's split
    for i, line in enumerate(tuner.fitted()):  # each line goes through its worker's measured steps
        measured = [(r["batch_sizes"][i], r["batch_sizes"][i] / r["worker_samples_per_s"][i]) for r in tuner.runs]
        assert any(line(b) == pytest.approx(t, rel=1e-9) for b, t in measured), (i, measured, line)
    assert "predicted" in tuner.split_label.value and "finish together" in tuner.recommended_label.value
    # the 4× slower mac, simulated, is seen as slower in every run (a two-point line's slope alone is noise
    # on a busy machine). 1.5×, not 4×: with a busy loop per core the OS favours the worker that sleeps, and
    # the desktop's own steps ran up to 1.7× slower beside it (test_ps, issue 58): 4 ÷ 1.7 leaves 1.5 a margin
    assert all(r["worker_samples_per_s"][0] > 1.5 * r["worker_samples_per_s"][1] for r in tuner.runs)
    assert len(tuner.figure.axes[1].lines[0].get_ydata()) == 2
    bundle = tuner._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle

    # a mistake shows up in the widget as one line, not as a lost traceback
    assert tuner.shut_down_note() is None
    training.shutdown()
    tuner.run_button.click()  # must not raise
    assert "shut down" in tuner.error and "HetlabError" in tuner.result_label.value
    assert "re-run the notebook's set-up cell" in tuner.error and "\n" not in tuner.error
    assert not tuner.run_button.disabled
    tuner.auto_button.click()  # Auto says the same, and does not start anything
    assert "re-run the notebook's set-up cell" in tuner.error and tuner.tune_result is result
