"""benchmarks/pair_vs_alone.py compares the same work at any batch (issue 44, item 5): its pure parts."""
import importlib.util
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "pair_vs_alone.py"
spec = importlib.util.spec_from_file_location("pair_vs_alone_bench", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_plan_trains_the_same_samples_with_three_timed_rounds_at_every_h():
    for batch in (128, 256, 1024):
        hs = bench.local_steps_for(batch, 60_000)
        size, passes = bench.equal_work(16_384, 2, batch, 60_000, hs)
        assert size <= 60_000 and passes >= 2
        for h in hs:                                     # a whole number of rounds at every H
            assert size % (h * batch) == 0
            assert size * passes // (h * batch) >= bench.MIN_ROUNDS + 1   # one warm-up round, then ≥ 3
    assert bench.local_steps_for(1024, 60_000) == (4, 8, 16, 32)       # H=64 at 1024 is 65,536 a round


def test_the_sweep_reaches_the_largest_share_any_plan_gives():
    assert max(bench.sweep_sizes(1024)) == 1024 and max(bench.sweep_sizes(128)) == 128
    assert bench.sweep_sizes(128) == (16, 64, 128)


def test_the_verdict_is_checked_both_ways():
    over = {"desktop alone": 1.0, "sync per step": 0.5, "local SGD H=16": 1.3}
    assert bench.borne_out("desktop alone", over, {}, 1.15) == (False, "local SGD H=16")   # a missed gain
    assert bench.borne_out("desktop alone", {**over, "local SGD H=16": 1.1}, {}, 1.15) == (True, None)
    pick = "planner's pick: local SGD H=16"
    to = {"desktop alone": 2.0, pick: 1.5}
    assert bench.borne_out(pick, {"desktop alone": 1.0, pick: 1.2}, to, 1.15) == (True, None)
    assert bench.borne_out(pick, {"desktop alone": 1.0, pick: 0.9}, to, 1.15) == (False, pick)  # a false gain


def test_the_planners_sweep_takes_turns_with_equal_samples_a_window():
    """Every size gets one window a round, as many samples as the largest: a moment of load weighs on all
    sizes alike, and the small batches' points are not a few milliseconds each (issue 50)."""
    line, points = bench.fit_plain_loop((16, 64), steps=2, rounds=3)
    assert sorted(points) == [16, 64] and line.per_sample_s >= 0
    for b, speed in points.items():
        assert len(speed.windows) == 3                       # one window per round
        assert speed.steps * b == 3 * 2 * 64                 # 3 rounds × the largest's samples a window
        assert speed.warmup_steps == bench.WARMUP_STEPS      # the first round's warm-up only, apart
