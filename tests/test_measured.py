"""hetlab.store.measured: notebook 02 saves each machine's speeds, 06 and 08 (and the planner) read them.
Pure: files in a temporary folder, no torch, no Ray."""
import json
import math

import pytest

from hetlab import HetlabError
from hetlab.arithmetic import estimates, planner
from hetlab.arithmetic.steptime import from_sweep
from hetlab.store import measured, saved_pair
from hetlab.vocab import MEASURED_ENV

DEVICE = {"device": "cuda", "name": "NVIDIA GeForce RTX 4070 Ti"}
SIZES = [1, 16, 256]
FIGURES = {"small": [1_000.0, 16_000.0, 64_000.0], "classic": [500.0, 4_000.0, 8_000.0]}


def test_save_and_load_round_trip(tmp_path):
    p = measured.save("desktop", DEVICE, SIZES, FIGURES, where=tmp_path)
    assert p == tmp_path / "desktop.json"
    data = measured.load("desktop", tmp_path)
    assert data["batch_sizes"] == SIZES and data["samples_per_s"] == FIGURES
    assert data["role"] == "desktop" and data["device"] == "cuda" and data["optimizer"] == "adam"
    assert data["accelerator"] == DEVICE["name"] and data["host"] and data["date"]
    assert measured.load("mac", tmp_path) is None
    assert not list(tmp_path.glob("*.tmp"))   # written atomically, nothing left behind


def test_speed_at_a_batch_is_the_fitted_lines(tmp_path):
    """One meaning of a speed at batch b: the step line's b ÷ t(b), between and beyond the sweep."""
    measured.save("desktop", DEVICE, SIZES, FIGURES, where=tmp_path)
    at = lambda b, model="small": float(measured.speed("desktop", model, b, tmp_path))
    for model in FIGURES:
        line = measured.step_time("desktop", model, tmp_path)
        for b in (1, 4, 64, 256, 4096):
            assert at(b, model) == pytest.approx(b / line(b))
    assert at(4) < at(64) < at(4096)           # a fixed cost a step: samples/s grow with the batch
    s = measured.speed("desktop", "small", 128, tmp_path)
    assert s.source.startswith("measured on ") and "cuda" in s.source


def test_without_a_file_the_figure_is_estimated_and_says_so(tmp_path):
    s = measured.speed("mac", "small", 128, tmp_path)
    assert float(s) == pytest.approx(128 / estimates.labelled("mac", "small")(128))
    assert "estimated" in s.source and "M2" in s.source
    measured.save("mac", {"device": "mps"}, SIZES, {"small": FIGURES["small"]}, where=tmp_path)
    assert not measured.speed("mac", "classic", 128, tmp_path).source.startswith("measured")   # a model not measured
    with pytest.raises(HetlabError, match="no estimated step time"):
        measured.speed("laptop", "small", 128, tmp_path)


def test_the_step_time_is_fitted_to_the_saved_sweep_and_the_planner_reads_it(tmp_path):
    measured.save("desktop", DEVICE, SIZES, FIGURES, where=tmp_path)
    fitted = from_sweep(SIZES, FIGURES["small"])
    line = measured.step_time("desktop", "small", tmp_path)
    assert (line.fixed_s, line.per_sample_s) == (fitted.fixed_s, fitted.per_sample_s)
    assert line.fixed_s > 0 and line.per_sample_s > 0 and line.source.startswith("measured on ")
    desktop, mac = (measured.step_time(role, "small", tmp_path) for role in ("desktop", "mac"))
    assert desktop == line and "estimated" in mac.source
    assert planner.advise((desktop, mac), 30_000, planner.GIGABIT, 256, engine_s=0.005).speedup >= 1
    assert all("estimated" in d.source for d in planner.assumed_devices("classic"))


def test_the_engines_cost_is_saved_and_read_back_else_the_practice_figure(tmp_path):
    default = measured.engine_cost(tmp_path)
    assert float(default) == estimates.ENGINE_S and "practice" in default.source
    measured.save_engine(0.0042, 0.003, where=tmp_path)
    mine = measured.engine_cost(tmp_path)
    assert float(mine) == 0.0042 and mine.source.startswith("measured") and "notebook 05" in mine.source
    with pytest.raises(HetlabError, match="seconds"):
        measured.save_engine(-1.0, where=tmp_path)
    (tmp_path / "engine.json").write_text("{broken")
    with pytest.raises(HetlabError, match="not hetlab's engine file"):
        measured.engine_cost(tmp_path)


@pytest.mark.parametrize("text", ["{not json", json.dumps({"format": 1}), json.dumps(
    {"format": 1, "batch_sizes": [1, 2], "samples_per_s": {"small": [5.0]}}), json.dumps(
    {"format": 1, "batch_sizes": [1], "samples_per_s": {"small": [-5.0]}})])
def test_a_bad_file_is_a_one_line_error(tmp_path, text):
    (tmp_path / "mac.json").write_text(text)
    with pytest.raises(HetlabError, match="not hetlab's mac file") as err:
        measured.speed("mac", "small", 128, tmp_path)
    assert "\n" not in str(err.value) and "notebook 02" in str(err.value)


READERS = {  # each reader of the figures folder, its file there, and what it gives when there is none
    "load": (lambda: measured.load("mac"), "mac.json", None),
    "engine_cost": (lambda: float(measured.engine_cost()), "engine.json", estimates.ENGINE_S),
    "load_run": (lambda: measured.load_run("05"), "notebook-05.json", None),
    "load_figure": (lambda: measured.load_figure("link"), "link.json", None),
    "graded": (lambda: measured.load_graded(), "exercises.json", {}),
    "saved_pair": (lambda: saved_pair.load(), "pair.json", None)}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "null", json.dumps({"format": 1})])
def test_every_reader_gives_its_empty_value_without_a_file_and_one_line_for_a_damaged_one(folder, reader, text):
    read, name, empty = READERS[reader]
    assert read() == empty
    (folder / name).write_text(text)
    with pytest.raises(HetlabError, match="delete it") as err:
        read()
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{folder / name} is not hetlab's ")


def test_refusals(tmp_path):
    with pytest.raises(HetlabError, match="simple name"):
        measured.path("../mac", tmp_path)
    with pytest.raises(HetlabError, match="one positive samples/s per batch size"):
        measured.save("mac", DEVICE, SIZES, {"small": [1.0, math.nan, 2.0]}, where=tmp_path)


def test_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(MEASURED_ENV, str(tmp_path))
    assert measured.folder() == tmp_path
    monkeypatch.delenv(MEASURED_ENV)
    assert measured.folder().name == "measured"
    assert measured.guess_role() in ("desktop", "mac")
