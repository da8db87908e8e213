"""hetlab.arithmetic.balance: batch splitting (pure arithmetic) and auto-tuning (synthetic and real)."""
import math
import random
import time

import pytest
import torch

from hetlab.arithmetic import steptime
from hetlab.arithmetic.steptime import StepTime
from hetlab.arithmetic.balance import (TuneRound, auto_tune, check_proportions, efficiency, equal_finish_split,
                                       follow_split, format_split, round_lines, scale_local_steps,
                                       split_batch)
from hetlab.arithmetic.steptime import constant_speed, predicted_efficiency, step_time
from hetlab.core.data import load_mnist
from hetlab.core.models import make_model
from hetlab.errors import HetlabError


@pytest.mark.parametrize("global_batch, weights, expected", [
    (64, [4, 1], [51, 13]),          # 51.2 / 12.8 → floors 51 + 12, the leftover to the .8
    (64, [1, 1], [32, 32]),
    (10, [1, 1, 1], [4, 3, 3]),      # ties: the leftover goes to the first worker
    (100, [0.5, 0.3, 0.2], [50, 30, 20]),
    (3, [1000, 1, 1], [1, 1, 1]),    # every worker keeps at least one sample
    (5, [1e-9, 1], [1, 4]),
    (128, [3000.0, 1000.0], [96, 32]),  # measured samples/s work as proportions
])
def test_split_batch_known_values(global_batch, weights, expected):
    assert split_batch(global_batch, weights) == expected


def test_split_batch_properties_on_random_inputs():
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 6)
        weights = [rng.uniform(0.01, 100) for _ in range(n)]
        g = rng.randint(n, 600)
        sizes = split_batch(g, weights)
        assert sum(sizes) == g and len(sizes) == n and min(sizes) >= 1
        exact = [g * w / sum(weights) for w in weights]
        if all(q >= 1 for q in exact):  # no minimum-one bump: largest remainder is within 1
            assert all(abs(s - q) < 1 for s, q in zip(sizes, exact))


def test_split_batch_makes_workers_finish_together():
    speeds = [4000.0, 1000.0]  # samples/s: a fast and a 4× slower worker
    sizes = split_batch(500, speeds)
    times = [b / t for b, t in zip(sizes, speeds)]
    assert sizes == [400, 100] and times[0] == pytest.approx(times[1])


@pytest.mark.parametrize("global_batch, weights, n, words", [
    (64, [1, -1], None, "positive"),
    (64, [1, 0], None, "positive"),
    (64, [0, 0], None, "positive"),
    (64, [1, float("nan")], None, "positive"),
    (64, [1, float("inf")], None, "positive"),
    (64, [1, 2, 3], 2, "for 2 workers"),
    (64, [], None, "one positive number per worker"),
    (64, "4:1", None, "one positive number per worker"),
    (64, [1, "a"], None, "positive"),
    (1, [1, 1], None, "whole number ≥ 2"),
    (0, [1], None, "whole number ≥ 1"),
    (-5, [1], None, "whole number ≥ 1"),
    (64.5, [1], None, "whole number"),
])
def test_split_batch_rejects_bad_input_with_one_line(global_batch, weights, n, words):
    with pytest.raises(HetlabError) as err:
        split_batch(global_batch, weights, n=n)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_check_proportions_accepts_numbers_and_returns_floats():
    assert check_proportions((3, 1.5), n=2) == [3.0, 1.5]
    assert all(isinstance(w, float) for w in check_proportions([1, 2]))
    assert not math.isnan(sum(check_proportions([1e-12, 1e12])))


# --- efficiency arithmetic ----------------------------------------------------------------

def test_efficiency_arithmetic_of_equal_and_proportional_splits():
    speeds = [4000.0, 1000.0]
    lines = [constant_speed(t) for t in speeds]
    # equal split: the fast worker finishes 64 samples in 16 ms, then waits for the slow one's 64 ms
    assert step_time(lines, [64, 64]) == pytest.approx(0.064)
    assert predicted_efficiency(lines, [64, 64]) == pytest.approx(0.4)
    # proportional split: both take 25.6 ms → nothing is wasted
    assert predicted_efficiency(lines, [102.4, 25.6]) == pytest.approx(1.0)
    assert efficiency(4500.0, speeds) == pytest.approx(0.9)
    with pytest.raises(HetlabError):
        efficiency(100.0, [1000.0, 0.0])


def test_format_split():
    assert format_split([51, 13]) == "51:13 (80% / 20%)"


# --- auto_tune ----------------------------------------------------------------------------

def overhead_model(speeds, per_step_s=0.002):
    """A worker whose step costs a fixed overhead plus b / speed: samples/s grow with b."""
    return lambda sizes: [b / (per_step_s + b / t) for b, t in zip(sizes, speeds)]


def test_auto_tune_settles_near_the_throughput_ratio():
    result = auto_tune(overhead_model([4000.0, 1000.0]), 128, 2)
    assert result.converged and sum(result.batch_sizes) == 128
    assert result.history[0].batch_sizes == [64, 64]  # starts from the equal split
    assert 3.2 < result.batch_sizes[0] / result.batch_sizes[1] < 4.5
    first, last = (predicted_efficiency([constant_speed(t) for t in r.samples_per_s], r.batch_sizes)
                   for r in (result.history[0], result.history[-1]))
    assert last > 0.9 > 0.5 > first
    assert "settled" in str(result)


def test_auto_tune_gives_the_fixed_cost_its_due():
    """The slow worker's step has a large fixed part (its messages, its per-step overhead):
    a split ∝ samples/s leaves the fast one waiting; the fitted model finds equal finish times."""
    speeds, fixed = [4000.0, 1000.0], [0.005, 0.040]
    measure = lambda sizes: [b / (c + b / t) for b, t, c in zip(sizes, speeds, fixed)]
    result = auto_tune(measure, 512, 2)
    assert result.converged and len(result.history) <= 4
    lines = [StepTime(c, 1 / t) for t, c in zip(speeds, fixed)]
    assert result.batch_sizes == equal_finish_split(512, lines) == [438, 74]
    proportional = split_batch(512, measure([256, 256]))    # ∝ the samples/s at the equal split
    assert proportional == result.history[1].batch_sizes == [415, 97]
    step = lambda sizes: step_time(lines, sizes)
    assert step(proportional) > 1.15 * step(result.batch_sizes)
    assert result.lines[1].fixed_s == pytest.approx(0.040)        # the rounds' fit found the slow one's fixed part


def test_the_rounds_fit_separates_the_fixed_part_and_falls_back_on_noise():
    def rounds(sizes, seconds, weights=None):
        line = steptime.fit_rounds(sizes, seconds, weights)
        return line.speed, line.fixed_s
    assert rounds([100, 200, 400], [0.03, 0.05, 0.09]) == pytest.approx((5000.0, 0.01))
    assert rounds([100], [0.05]) == pytest.approx((2000.0, 0.0))              # one size: no fixed part
    assert rounds([100, 105], [0.05, 0.08]) == pytest.approx((105 / 0.08, 0.0))  # too close to tell
    assert rounds([100, 200], [0.08, 0.05]) == pytest.approx((4000.0, 0.0))   # slower with fewer: noise
    # a line whose fixed part (55 ms) is longer than the quickest step measured (32 ms): noise
    assert rounds([64, 31, 14], [0.120, 0.160, 0.032]) == pytest.approx((14 / 0.032, 0.0))
    # the one fallback: the heaviest round (equal weights: the newest)
    assert rounds([256, 111, 1], [0.338, 0.267, 0.0114]) == pytest.approx((1 / 0.0114, 0.0))
    assert rounds([256, 111, 1], [0.338, 0.267, 0.0114], [4, 2, 1]) == pytest.approx((256 / 0.338, 0.0))
    # weights move the line: the fresh rounds count more than a stale outlier
    fresh = rounds([100, 200, 400, 100], [0.09, 0.05, 0.09, 0.03], [1e-3, 1, 1, 1])
    assert fresh == pytest.approx((5000.0, 0.01), rel=0.02) != rounds([100, 200, 400, 100], [0.09, 0.05, 0.09, 0.03])
    with pytest.raises(HetlabError, match="one batch size, time and weight"):
        rounds([100, 105], [0.05, 0.08], [1])


def test_auto_tunes_rounds_weigh_size_and_freshness():
    """Issue 60: the equal first round is the slow worker's largest and its stalest. A round counts
    its batch size halved for each newer round, so where noise decides, a fresh round of a fair size
    sets the speed, and a 1-sample round never does (auto-tune's fallback took the largest before)."""
    slow = lambda at: [3750.0, at]             # both workers' samples/s in a round
    history = [TuneRound([256, 256], slow(200.0)), TuneRound([420, 92], slow(260.0)),
               TuneRound([424, 88], slow(250.0))]
    line = round_lines(history)[1]             # 92 vs 88: too close to fit; 256 two rounds stale
    assert line.fixed_s == 0 and line.speed == pytest.approx(250.0)
    tiny = [TuneRound([256, 256], slow(200.0)), TuneRound([511, 1], slow(0.5))]   # a 2 s hiccup
    assert round_lines(tiny)[1].speed == pytest.approx(200.0)   # not the 1-sample round's 0.5


def test_auto_tune_three_workers():
    result = auto_tune(overhead_model([3000.0, 1500.0, 500.0], 0.0), 300, 3)
    assert result.batch_sizes == [180, 90, 30]


def test_auto_tune_damps_noisy_measurements():
    rng = random.Random(1)
    clean = overhead_model([4000.0, 1000.0])
    noisy = lambda sizes: [t * rng.uniform(0.7, 1.3) for t in clean(sizes)]  # ±30 % noise
    result = auto_tune(noisy, 256, 2, rounds=12)
    assert len(result.history) <= 12 and sum(result.batch_sizes) == 256
    assert 2.5 < result.batch_sizes[0] / result.batch_sizes[1] < 6.5


def test_auto_tune_confirms_a_settled_split_before_trusting_it():
    """Without noise the confirming round measures the settled sizes again and agrees."""
    speeds, fixed = [4000.0, 1000.0], [0.005, 0.040]
    measure = lambda sizes: [b / (c + b / t) for b, t, c in zip(sizes, speeds, fixed)]
    confirmed, trusting = auto_tune(measure, 512, 2), auto_tune(measure, 512, 2, confirm=0)
    assert confirmed.batch_sizes == trusting.batch_sizes == [438, 74] and confirmed.converged
    assert len(confirmed.history) == len(trusting.history) + 1
    assert confirmed.history[-1].batch_sizes == confirmed.history[-2].batch_sizes == [438, 74]
    # out of rounds while still confirming: the sizes stand, but not as settled
    short = auto_tune(measure, 512, 2, rounds=len(trusting.history))
    assert short.batch_sizes == [438, 74] and not short.converged


def test_a_confirming_round_keeps_noise_from_settling_the_split_too_early():
    """The practice cluster's pair as measured here (desktop 3,750 samples/s; simulated Mac
    20 ms + 0.99 ms per sample, so equal finish at 420:92), each round ±6 % / ±4 % off
    (what 8-step rounds scatter on this shared box). Over 400 seeded tunings, the split
    that one round called settled costs more than 5 % of the best step in about 1 tuning
    of 10; with a confirming round, in fewer than half as many."""
    def step_ms(sizes):
        return max(sizes[0] / 3.75, 20 + 0.99 * sizes[1])
    best = min(step_ms([d, 512 - d]) for d in range(1, 512))

    def share_off(confirm):
        off = 0
        for seed in range(400):
            rng = random.Random(seed)
            noisy = lambda sizes: [sizes[0] / (sizes[0] / 3.75 * (1 + rng.gauss(0, 0.06))) * 1e3,
                                   sizes[1] / ((20 + 0.99 * sizes[1]) * (1 + rng.gauss(0, 0.04))) * 1e3]
            off += step_ms(auto_tune(noisy, 512, 2, confirm=confirm).batch_sizes) > 1.05 * best
        return off / 400

    trusting, confirmed = share_off(0), share_off(1)
    assert 0.05 < trusting and confirmed < trusting / 2, (trusting, confirmed)


def test_a_first_round_measured_otherwise_does_not_steer_the_tuned_split():
    """Issue 60: the equal first round ran while the practice workers shared the cores otherwise
    (here the desktop 30 % slower and the Mac 15 % faster than in later rounds). A round weighs its
    freshness as well as its size, so over 400 seeded tunings of the same pair as above fewer than
    1 in 20 settle more than 5 % from the best step (2.5 %; 10.8 % when the largest, stalest
    round decided the fallback and every round counted alike, as before issue 60)."""
    def step_ms(sizes):
        return max(sizes[0] / 3.75, 20 + 0.99 * sizes[1])
    best = min(step_ms([d, 512 - d]) for d in range(1, 512))
    off = 0
    for seed in range(400):
        rng, calls = random.Random(seed), []

        def measure(sizes):
            calls.append(sizes)
            desktop, mac = (0.7, 1.15) if len(calls) == 1 else (1.0, 1.0)
            return [sizes[0] / (sizes[0] / 3.75 * (1 + rng.gauss(0, 0.06))) * 1e3 * desktop,
                    sizes[1] / ((20 + 0.99 * sizes[1]) * (1 + rng.gauss(0, 0.04))) * 1e3 * mac]
        off += step_ms(auto_tune(measure, 512, 2).batch_sizes) > 1.05 * best
    assert off / 400 < 0.05, off / 400


def test_one_slow_round_does_not_leave_a_worker_with_one_sample():
    """Seen on this box (benchmarks/hetero_efficiency.py, 2026-11-25): in the second round the
    simulated Mac ran at about half its speed. The line through its two points gave it a fixed
    cost of 212 ms a step, so the next split gave it 1 sample of 512; there a step is mostly
    fixed cost, and taken as its speed per sample (88 samples/s, 9× too slow) that split
    looked settled and was confirmed. The same pair as above (equal finish at 420:92)."""
    rounds = []

    def measure(sizes):
        mac = sizes[1] / (20 + 0.99 * sizes[1]) * 1e3
        rounds.append(sizes)
        return [3750.0, mac * (0.55 if len(rounds) == 2 else 1.0)]   # round 2: the Mac at 55 %

    result = auto_tune(measure, 512, 2, rounds=6)
    assert rounds[2] == [511, 1]                          # the slow round still throws it off once
    assert 400 <= result.batch_sizes[0] <= 440, result    # and it comes back near 420:92


def test_auto_tune_rejects_bad_measurements_and_arguments():
    with pytest.raises(HetlabError, match="not one positive samples/s per worker"):
        auto_tune(lambda sizes: [1000.0], 64, 2)
    with pytest.raises(HetlabError, match="not one positive samples/s per worker"):
        auto_tune(lambda sizes: [1000.0, float("nan")], 64, 2)
    for kwargs in ({"rounds": 0}, {"n_workers": 0}, {"confirm": -1}):
        args = {"measure": overhead_model([1.0, 1.0]), "global_batch": 64, "n_workers": 2, **kwargs}
        with pytest.raises(HetlabError):
            auto_tune(**args)


def test_auto_tune_with_real_training_steps_and_a_simulated_slow_worker():
    """Real MNIST steps on this CPU; worker 1 is *simulated* 4× slower (it sleeps 3× its compute)."""
    torch.manual_seed(0)
    data = load_mnist("train").subset(2048, seed=0)
    x, y = data.normalized(), data.labels
    workers = [(make_model("small", seed=0), 1.0), (make_model("small", seed=0), 4.0)]
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m, _ in workers]

    def measure(sizes):
        speeds = []
        for (model, slowdown), opt, b in zip(workers, opts, sizes):
            busy = 0.0
            for step in range(3):
                idx = torch.randint(0, len(y), (b,))
                t0 = time.perf_counter()
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
                compute = time.perf_counter() - t0
                time.sleep((slowdown - 1) * compute)  # clock-ok: the simulated slowdown itself, not a wait
                busy += slowdown * compute
            speeds.append(3 * b / busy)
        return speeds

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per worker is steadier on a small, shared box
    try:
        result = auto_tune(measure, 160, 2, rounds=4)
    finally:
        torch.set_num_threads(threads)
    assert sum(result.batch_sizes) == 160 and len(result.history) >= 2
    assert result.history[0].batch_sizes == [80, 80]
    # the fast worker must end up with clearly more of the batch (4:1 ideally; the box is noisy)
    assert result.batch_sizes[0] > 2 * result.batch_sizes[1]


def test_follow_split_equalises_finish_times_and_ignores_small_gains():
    # worker 1 became 2× slower: the split ∝ speeds; then a measurement within noise moves nothing
    assert follow_split([64, 64], [constant_speed(1000), constant_speed(500)]) == [85, 43]
    assert follow_split([85, 43], [constant_speed(1000), constant_speed(480)]) == [85, 43]
    # a fixed cost per message (e.g. the Mac's Wi-Fi round trip) takes from its share:
    # 0.02 + b/500 = b'/1000 with b + b' = 128  →  b = 36, and both finish at once
    lines = [StepTime(0.0, 1 / 1000), StepTime(0.02, 1 / 500)]
    sizes = follow_split([64, 64], lines)
    assert sizes == [92, 36] and abs(step_time(lines, sizes) - 0.092) < 1e-9


def test_scale_local_steps_gives_each_worker_steps_in_proportion_to_its_speed():
    assert scale_local_steps(8, [2000, 1000]) == [8, 4]
    assert scale_local_steps(8, [100, 2000, 1]) == [1, 8, 1]  # at least one step each
    with pytest.raises(HetlabError, match="local_steps"):
        scale_local_steps(0, [1, 1])
