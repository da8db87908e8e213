"""The pure readings of benchmarks/hetero_efficiency.py and benchmarks/pair_search.py (issue 60, items
2 and 5): made-up records in, the arithmetic checked; no Ray, no training."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from hetlab.ps.records import StepRecord


def load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_bench", Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_best_fixed_split_in_hindsight_weighs_each_steps_noise():
    """Desktop 0.5 ms a sample, steady; the mac 2 ms a sample, but every other step 20 % slower. Balanced
    for the mean (2.2 ms a sample) it would get 95 of 512; step by step its slow steps set the pace,
    so the best fixed split gives it fewer, and the reading says what that saves."""
    bench = load("hetero_efficiency")
    records = []
    for step in range(10):
        mac_per_sample = 0.0024 if step % 2 else 0.002
        records += [StepRecord(step, "desktop", 417, 417 * 0.0005, 0.0, 0.0, 0.0, 0.0),
                    StepRecord(step, "mac", 95, 95 * mac_per_sample / 4, 95 * mac_per_sample * 3 / 4, 0.0, 0.0, 0.0)]
    got = bench.split_in_hindsight(records)
    assert got["ran"] == [417, 95] and got["best"][1] < 95 and sum(got["best"]) == 512
    assert got["ran_ms"] == pytest.approx((417 * 0.5 + 95 * 2.4) / 2, rel=1e-6)   # the desktop, then the mac, sets each
    assert 0 < got["ran_ms"] - got["best_ms"] < 15


def test_steps_by_their_place_in_a_run():
    bench = load("hetero_efficiency")
    records = [StepRecord(step, "w", 1, 0.0, 0.0, 0.0, 0.0, 0.0, step_s=0.3 if step in (0, 10) else 0.1)
               for step in list(range(3)) + list(range(10, 14))]       # two runs: steps 0-2 and 10-13
    assert bench.by_position(records) == pytest.approx([300.0, 100.0, 100.0])


def test_the_slot_timeline_splits_idle_time_into_start_between_and_end():
    bench = load("pair_search")
    trial = lambda role, start, end, busy, width=16: SimpleNamespace(   # noqa: E731
        role=role, spans=[[role, start, end]], busy_s=busy, samples=1000, config={"width": width})
    result = SimpleNamespace(trials=[trial("desktop", 0.0, 4.0, 3.0), trial("desktop", 4.5, 10.0, 5.0, 32),
                                     trial("mac", 1.0, 7.0, 5.0, 8)],
                             wall_s=10.4, running_s=10.4, packing={"desktop": 1, "mac": 1})
    t = bench.slot_timeline(result)
    assert t["tail"] == pytest.approx(0.4)
    assert t["desktop"] == pytest.approx({"k": 1, "trials": 2, "start": 0.0, "end": 0.0, "between": 0.5,
                                          "in_trials": 1.5, "training": 8.0, "work_per_s": 3000 / 8.0})
    assert (t["mac"]["start"], t["mac"]["end"], t["mac"]["between"]) == pytest.approx((1.0, 3.0, 0.0))
