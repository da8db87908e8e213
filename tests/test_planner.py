"""The planner's arithmetic, checked against cases computed by hand.

``steptime.constant_speed`` devices have no fixed cost per step and ``engine_s=0``
leaves the engine out, so each case is the arithmetic of one formula; tests/test_steptime.py
has the step-time model (a fixed cost per step) and the engine's cost.
"""
import math

import pytest

from hetlab import HetlabError
from hetlab.arithmetic import planner, steptime
from hetlab.arithmetic.planner import (GIGABIT, WIFI, Link, advise,
                            at_split, exchange_seconds, with_mac)

# 8 Mbit/s = 1e6 bytes/s, so 1000 fp32 parameters up + down = 8000 bytes = 8 ms.
SLOW = Link(8.0, 0.0, "test link")
def speeds(*samples_per_s):
    return tuple(steptime.constant_speed(s) for s in samples_per_s)


T = speeds(1000.0, 500.0)  # desktop, mac


def test_exchange_is_round_trip_plus_both_directions():
    assert exchange_seconds(1000, SLOW) == pytest.approx(0.008)
    assert exchange_seconds(1000, Link(8.0, 2.0)) == pytest.approx(0.010)
    assert exchange_seconds(1000, SLOW, bytes_per_value=2) == pytest.approx(0.006)  # fp16 up, fp32 down


def test_desktop_alone():
    plan = at_split(T, (100, 0), 1000, SLOW)
    assert plan.batch_sizes == (100, 0)
    assert plan.step_s == pytest.approx(0.1)
    assert plan.samples_per_s == pytest.approx(1000)
    assert plan.bytes_per_sample == 0


def test_sync_best_split_by_hand():
    # ideal mac share = 500 (100 - 1000·0.008) / 1500 = 30.67 → 31; desktop 69.
    # step = max(69/1000, 31/500 + 0.008) = max(0.069, 0.070) = 0.070 s.
    plan = with_mac(T, 1000, SLOW, 100, engine_s=0)
    assert plan.batch_sizes == (69, 31)
    assert plan.step_s == pytest.approx(0.070)
    assert plan.samples_per_s == pytest.approx(100 / 0.070)
    assert plan.comm_s == pytest.approx(0.008)
    assert plan.bytes_per_sample == pytest.approx(8000 / 100)


def test_mac_left_out_when_exchange_costs_a_whole_desktop_step():
    # B / T_d = 8 / 1000 = 8 ms = one exchange: the Mac cannot help.
    plan = with_mac(T, 1000, SLOW, 8, engine_s=0)
    assert plan.batch_sizes == (8, 0)
    assert plan.samples_per_s == pytest.approx(1000)
    assert "left out" in plan.name


def test_mac_left_out_when_a_whole_sample_is_too_much():
    # T_m = 100, H = 4, B = 8: ideal mac share 100 (32 - 8) / (4 · 1100) = 0.55 → 1 sample,
    # but then a round takes 4/100 + 0.008 = 0.048 s > 32/1000: slower than the desktop alone.
    plan = with_mac(speeds(1000.0, 100.0), 1000, SLOW, 8, local_steps=4, engine_s=0)
    assert plan.batch_sizes == (8, 0) and plan.samples_per_s == pytest.approx(1000)


def test_local_sgd_by_hand():
    # H = 2: ideal mac share = 500 (16 - 8) / (2 · 1500) = 1.33 → 1; desktop 7.
    # round = max(2·7/1000, 2·1/500 + 0.008) = max(0.014, 0.012) = 0.014 s for 16 samples.
    assert not with_mac(T, 1000, SLOW, 8, local_steps=1, engine_s=0).uses_mac   # H = 1: the Mac left out
    plan = with_mac(T, 1000, SLOW, 8, local_steps=2, engine_s=0)
    assert plan.batch_sizes == (7, 1)
    assert plan.round_s == pytest.approx(0.014)
    assert plan.samples_per_s == pytest.approx(16 / 0.014)
    assert plan.bytes_per_sample == pytest.approx(8000 / 16)


def test_local_sgd_with_16_bit_deltas_sends_three_quarters_of_the_bytes():
    fp32 = with_mac(T, 1000, SLOW, 100, local_steps=4, bytes_per_value=4, engine_s=0)
    fp16 = with_mac(T, 1000, SLOW, 100, local_steps=4, bytes_per_value=2, engine_s=0)
    # deltas up in 16 bits (2 bytes), weights down always in fp32 (4): 6 of 8 bytes per parameter
    assert fp16.bytes_per_sample == pytest.approx(fp32.bytes_per_sample * 6 / 8)
    assert fp16.samples_per_s >= fp32.samples_per_s


def test_advice_counts_6_bytes_per_parameter_for_local_sgd():
    """What advise compares (notebook 08): local SGD sends fp16 deltas up (2 bytes) and gets fp32
    weights down (4), 6 bytes per parameter per exchange, not 4; per-step sync fp32 both ways, 8."""
    sync, *local = advise(T, 1000, SLOW, 100, local_steps=(4, 8), engine_s=0).plans[1:]
    assert sync.bytes_per_sample == pytest.approx(8 * 1000 / 100)
    assert [p.bytes_per_sample for p in local] == pytest.approx([6 * 1000 / (h * 100) for h in (4, 8)])


def test_speed_approaches_the_sum_of_both_devices_as_h_grows():
    rates = [with_mac(T, 1000, SLOW, 100, local_steps=h, engine_s=0).samples_per_s for h in (1, 4, 64)]
    assert rates[0] < rates[1] < rates[2] <= 1500
    assert rates[2] > 0.99 * 1500


def test_constant_speeds_on_wifi_keep_the_mac_out_of_per_step_sync():
    # Constant speeds for the 29k-parameter CNN (the old model): 100k samples/s and 20k.
    advice = advise(speeds(100_000, 20_000), 29_066, WIFI, 128, engine_s=0)
    sync = advice.plans[1]
    assert sync.batch_sizes[1] == 0                    # per-step sync: Mac left out
    assert advice.best.local_steps > 1                 # only local SGD can use it
    assert advice.speedup <= 1.2                       # never beyond (T_d + T_m) / T_d
    on_gigabit = advise(speeds(100_000, 20_000), 29_066, GIGABIT, 128, engine_s=0)
    assert on_gigabit.best.local_steps <= advice.best.local_steps


def test_advice_says_desktop_alone_when_nothing_gains():
    advice = advise(speeds(1000.0, 10.0), 1000, SLOW, 100, engine_s=0)   # a Mac 100× slower: < 5 % gain
    assert advice.best.name == "desktop alone" and advice.speedup == 1.0
    assert advice.verdict.startswith("use the desktop alone")


@pytest.mark.parametrize("bad", [0.0, math.nan, -1.0])
def test_bad_speeds(bad):
    with pytest.raises(HetlabError, match="positive samples/s"):
        steptime.constant_speed(bad)


def test_bad_inputs():
    with pytest.raises(HetlabError):
        with_mac(T, 1000, SLOW, 100, local_steps=0, engine_s=0)
    with pytest.raises(HetlabError):
        with_mac(T, 0, SLOW, 100, engine_s=0)
    with pytest.raises(HetlabError):
        exchange_seconds(1000, Link(0.0, 1.0))


def test_a_rounds_seconds_at_a_given_split():
    # mac: 50 samples at 500/s = 0.1 s, + one fp32 exchange 0.008 s; desktop 50 at 1000/s = 0.05 s
    assert at_split(T, (50, 50), 1000, SLOW, engine_s=0).round_s == pytest.approx(0.108)
    assert at_split(T, (50, 50), 1000, SLOW, local_steps=4, bytes_per_value=2, engine_s=0).round_s == pytest.approx(0.406)
    assert at_split(T, (100, 0), 1000, SLOW, engine_s=0).round_s == pytest.approx(0.1)   # desktop alone: no exchange


def test_the_engines_cost_is_paid_once_per_round():
    link = planner.Link(200.0, 0.0, "test")
    base = planner.at_split(T, [64, 64], 100_000, link, local_steps=8, engine_s=0).round_s
    more = planner.at_split(T, [64, 64], 100_000, link, local_steps=8, engine_s=0.031).round_s
    assert more == pytest.approx(base + 0.031)        # once per round of H=8 steps, not 8 times
    alone = planner.at_split(T, [128, 0], 100_000, link, engine_s=0.03).round_s
    assert alone == pytest.approx(0.128)             # nothing exchanged: the plain loop, no engine
    with pytest.raises(HetlabError, match="engine_s"):
        planner.at_split(T, [64, 64], 100_000, link, engine_s=-1)


def test_with_constant_speeds_no_plan_beats_the_ceiling_of_one_plus_the_macs_share():
    for rates in ((100_000, 20_000), (50_000, 5_000), (3_000, 2_000)):
        top = steptime.ceiling(*speeds(*rates), 128)
        assert top == pytest.approx(1 + rates[1] / rates[0])
        for link in (WIFI, GIGABIT, Link(10_000, 0.0, "a free link")):
            advice = advise(speeds(*rates), 29_066, link, 128, engine_s=0)
            assert advice.speedup <= top
            assert all(p.samples_per_s <= sum(rates) * (1 + 1e-12) for p in advice.plans)
