"""The step-time model t(b) = fixed + b × per-sample (notebook 02), and the planner built on it.

Pure arithmetic on synthetic timings: nothing here is timed, so nothing depends on this machine.
"""
import random

import pytest

from hetlab import HetlabError
from hetlab.arithmetic import balance, planner, steptime
from hetlab.ps.records import StepRecord, engine_cost, exchange_costs
from hetlab.arithmetic.steptime import StepTime

SIZES = [1, 4, 16, 64, 256, 1024]
CARD = StepTime(2.4e-3, 0.3e-6, "a launch-bound card")     # flat: 2.4 ms at 1, 2.7 ms at 1024
CPU = StepTime(0.5e-3, 120e-6, "a CPU")                     # nearly all per-sample work


@pytest.mark.parametrize("true", [CARD, CPU, StepTime(0.0, 50e-6), StepTime(3e-3, 0.0)])
def test_a_fit_recovers_fixed_and_per_sample_from_exact_timings(true):
    line = steptime.fit(SIZES, [true(b) for b in SIZES])
    assert line.fixed_s == pytest.approx(true.fixed_s, abs=1e-12)
    assert line.per_sample_s == pytest.approx(true.per_sample_s, abs=1e-15)


def test_a_fit_recovers_them_within_noise_and_from_a_samples_per_s_sweep():
    rng = random.Random(0)
    for true in (CARD, CPU):
        noisy = [true(b) * (1 + rng.uniform(-0.02, 0.02)) for b in SIZES]
        line = steptime.fit(SIZES, noisy)
        assert line.fixed_s == pytest.approx(true.fixed_s, rel=0.1, abs=2e-5)
        assert line.per_sample_s == pytest.approx(true.per_sample_s, rel=0.15, abs=2e-8)
        swept = steptime.from_sweep(SIZES, [b / true(b) for b in SIZES])
        assert swept.fixed_s == pytest.approx(true.fixed_s) and swept.per_sample_s == pytest.approx(true.per_sample_s)


def test_a_clamped_intercept_refits_the_slope_through_zero():
    # A CPU-like sweep whose best line would cross below 0: with no fixed cost the slope is the
    # weighted fit through 0, not the slope of the line that crossed (up to 20 % high here).
    sizes, seconds = [16, 32, 64, 128, 256], [0.30e-3, 0.66e-3, 1.5e-3, 3.4e-3, 7.5e-3]
    line = steptime.fit(sizes, seconds)
    assert line.fixed_s == 0

    def error(slope):   # what fit minimises: the relative error of each step
        return sum(((t - slope * b) / t) ** 2 for b, t in zip(sizes, seconds))
    assert error(line.per_sample_s) < min(error(line.per_sample_s * 0.99), error(line.per_sample_s * 1.01))


def test_a_fit_keeps_both_parts_non_negative():
    falling = steptime.fit([1, 2, 4], [3e-3, 2.9e-3, 2.8e-3])     # noise made it fall: flat
    assert falling.per_sample_s == 0 and falling.fixed_s == pytest.approx(2.9e-3, rel=0.02)
    steep = steptime.fit([10, 20, 40], [0.9e-3, 2e-3, 4.1e-3])    # would cross below 0: through 0
    assert steep.fixed_s == 0 and steep.per_sample_s > 0
    for bad in (([1], [1e-3]), ([4, 4], [1e-3, 2e-3]), ([1, 2], [1e-3, -1.0])):
        with pytest.raises(HetlabError):
            steptime.fit(*bad)


def test_the_h100_sweep_is_launch_bound():
    """docs/measured/2026-11-24-h100.json, the small CNN: the step hardly grows with the batch."""
    rates = [436.6, 1478.7, 7696.6, 31876.3, 131939.8, 448674.9]
    line = steptime.from_sweep(SIZES, rates)
    assert 1.8e-3 < line.fixed_s < 2.6e-3
    assert line(1024) < 1.1 * line(1)


@pytest.mark.parametrize("models", [(CPU, CPU.slowed(4)), (CARD, CPU), (CPU, CARD),
                                    (StepTime(1e-3, 10e-6), StepTime(5e-3, 40e-6))])
def test_the_split_equalises_finish_times_under_the_affine_model(models):
    for batch in (64, 128, 1000):
        sizes = balance.equal_finish_split(batch, models)
        times = [m(b) for m, b in zip(models, sizes)]
        one_sample = max(m.per_sample_s for m in models) + 1e-12
        slow = max(range(2), key=lambda i: times[i])
        if sizes[slow] == 1:      # even one sample takes it longer than the other's whole share
            assert models[slow](1) > models[1 - slow](batch - 1)
        else:                     # both finish together, up to one sample's time
            assert max(times) - min(times) <= one_sample
        # never worse than a split ∝ samples/s at this batch (up to one sample's rounding)
        naive = balance.split_batch(batch, [batch / m(batch) for m in models])
        assert max(times) <= max(m(b) for m, b in zip(models, naive)) + one_sample


def test_the_planners_split_ends_both_machines_together():
    d, m = CPU, CPU.slowed(4)
    splits = set()
    for h, rtt_ms in ((1, 0.0), (1, 3.0), (8, 3.0)):
        link = planner.Link(8.0, rtt_ms)
        plan = planner.with_mac((d, m), 1000, link, 128, h, 4, engine_s=0, keep_mac=True)
        b_d, b_m = plan.batch_sizes
        e = planner.exchange_seconds(1000, link)
        assert abs(h * d(b_d) - (h * m(b_m) + e)) <= h * (d.per_sample_s + m.per_sample_s)
        splits.add(b_m)
    assert len(splits) == 3       # each exchange and H moves the split: the balance sees both


def test_the_ceiling_is_one_for_a_flat_card_and_one_plus_the_share_for_constant_speeds():
    assert steptime.ceiling(CARD, CPU, 128) == pytest.approx(1.0, abs=0.005)   # 16 samples save the card 5 µs
    flat = StepTime(2e-3, 0.0)
    assert steptime.ceiling(flat, StepTime(1e-4, 1e-6), 128) == 1.0   # a share saves a flat card nothing
    a, b = steptime.constant_speed(1000.0), steptime.constant_speed(250.0)
    assert steptime.ceiling(a, b, 100) == pytest.approx(1.25)
    big = steptime.ceiling(CPU, CPU.slowed(4), 100_000)
    assert big == pytest.approx(1.25, rel=0.01)             # at a huge batch the fixed costs vanish


def test_a_flat_card_gains_nothing_and_the_verdict_says_why():
    advice = planner.advise((CARD, CPU), 29_066, planner.GIGABIT, 128, engine_s=0.005)
    assert advice.best.name == "desktop alone" and advice.speedup == 1.0
    assert "ceiling here is 1.00×" in advice.verdict or "ceiling here is 1.01×" in advice.verdict
    assert all(not p.uses_mac for p in advice.plans)        # every pair plan leaves the Mac out


def _random_pair(rng):
    d = StepTime(rng.uniform(0, 5e-3), rng.uniform(1e-7, 3e-4))
    return d, d.slowed(rng.uniform(1, 10))


def test_the_verdict_agrees_with_its_own_plans():
    rng = random.Random(1)
    for _ in range(300):
        pair = _random_pair(rng)
        link = planner.Link(rng.choice([50.0, 300.0, 1000.0, 1e6]), rng.choice([0.0, 0.5, 5.0]))
        batch, engine = rng.choice([32, 128, 1024, 8192]), rng.uniform(0, 8e-3)
        advice = planner.advise(pair, 29_066, link, batch, engine_s=engine)
        alone = advice.plans[0].samples_per_s
        top = steptime.ceiling(*pair, batch)
        assert all(p.samples_per_s <= top * alone * (1 + 1e-9) for p in advice.plans)
        gaining = [p for p in advice.plans if p.uses_mac and p.samples_per_s >= planner.MIN_GAIN * alone]
        if advice.verdict.startswith("add the Mac"):
            assert advice.best in gaining and advice.speedup == pytest.approx(advice.best.samples_per_s / alone)
        else:
            assert advice.verdict.startswith("use the desktop alone") and not gaining


def test_the_plain_loop_can_differ_from_the_desktops_worker():
    """On the practice cluster the desktop's worker has half the cores: the baseline is the plain loop."""
    worker, plain = CPU, CPU.slowed(0.5)
    advice = planner.advise((worker, worker.slowed(4)), 29_066, planner.SAME_MACHINE, 128, engine_s=0.003,
                            alone=plain)
    assert advice.plans[0].samples_per_s == pytest.approx(128 / plain(128))
    assert advice.verdict.startswith("use the desktop alone")


def _record(step, worker, compute, simulated, wait, step_s):
    return StepRecord(step=step, worker=worker, batch_size=1, compute_s=compute, simulated_s=simulated,
                      wait_s=wait, comm_s=0.0, loss=0.0, step_s=step_s)


def test_the_engines_cost_is_that_of_the_worker_beside_the_server():
    # desktop: 1 ms compute, waits 6 ms; mac: 2 + 1 ms, its messages cross a link (3 ms more)
    records = []
    for step in range(1, 6):
        records += [_record(step, "desktop", 1e-3, 0, 6e-3, 9e-3), _record(step, "mac", 2e-3, 1e-3, 0, 9e-3)]
    costs = exchange_costs(records)
    assert costs == pytest.approx({"desktop": 2e-3, "mac": 6e-3})
    assert engine_cost(records) == pytest.approx(2e-3)
    with pytest.raises(HetlabError):
        engine_cost([])
