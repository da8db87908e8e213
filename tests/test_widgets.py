"""hetlab.views.widgets.SplitTuner, headless: set the slider, click the buttons, against a REAL
ParameterServerTraining on a real local Ray with real MNIST (one worker simulated 4× slower)."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import ray  # noqa: E402

from hetlab.cluster.connecting import connect  # noqa: E402
from hetlab.core.data import load_mnist  # noqa: E402
from hetlab.arithmetic import balance  # noqa: E402
from hetlab.ps import Event, ParameterServerTraining, WorkerSpec  # noqa: E402
from hetlab.ps.records import per_worker_samples_per_s  # noqa: E402
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


def test_slider_run_and_errors_against_real_training(training):
    tuner = SplitTuner(training, global_batch=64, steps=2)
    assert len(tuner.sliders) == 1 and "desktop" in tuner.sliders[0].description
    assert tuner.batch_sizes() == [32, 32]  # starts from the training's current (equal) split
    tuner.sliders[0].value = 51             # the desktop's batch: the mac takes the rest
    assert tuner.batch_sizes() == [51, 13]

    step_before, split_before = training.step, tuple(training.batch_sizes)
    tuner.run_button.click()
    assert tuner.error is None
    assert training.step == step_before + 2
    assert training.events[-1] == Event(step_before, "resplit", "widget", split_before, (51, 13))  # the split's one writer
    run = tuner.runs[-1]
    assert [r.batch_size for r in run["records"]] == [51, 13, 51, 13]
    assert run["samples_per_s"] > 0 and 0 < run["efficiency"] <= 1.05
    assert "samples/s" in tuner.result_label.value and "∝ this run's speeds" in tuner.recommended_label.value
    assert bytes(tuner.plot.value[:4]) == PNG
    assert any("simulated" in t.get_text() for t in tuner.figure.legends[0].get_texts())
    assert any("simulated" in t.get_text() for t in tuner.figure.axes[0].get_yticklabels())

    tuner.sliders[0].value = 24
    tuner.run_button.click()  # a second run: both runs' samples/s listed
    assert [r["batch_sizes"] for r in tuner.runs] == [[51, 13], [24, 40]]
    assert tuner.result_label.value.split("runs so far: ")[1].count("/s") == 2
    # the 4× slower mac, simulated, is seen as slower in every run, so the split recommended gives it less
    # than half. 1.5×, not 4×: with a busy loop per core the OS favours the worker that sleeps, and the
    # desktop's own steps ran up to 1.7× slower beside it (test_ps, issue 58): 4 ÷ 1.7 leaves 1.5 a margin
    for r in tuner.runs:
        desktop, mac = per_worker_samples_per_s(r["records"], tuner.names)
        assert desktop > 1.5 * mac
    assert "recommended" in tuner.recommended_label.value and balance.split_batch(64, [desktop, mac])[1] < 32
    bundle = tuner._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle

    # a mistake shows up in the widget as one line, not as a lost traceback
    training.shutdown()
    tuner.run_button.click()  # must not raise
    assert "shut down" in tuner.error and "HetlabError" in tuner.result_label.value
    assert "re-run the notebook's set-up cell" in tuner.error and "\n" not in tuner.error
