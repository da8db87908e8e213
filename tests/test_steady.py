"""The one definition of a measured speed (hetlab.arithmetic.steady): warm-up apart, windows for the spread."""
import pytest

from hetlab.arithmetic.steady import steady
from hetlab.errors import HetlabError


def test_warmup_is_left_out_and_reported_apart():
    # 2 slow warm-up steps (a compile), then 9 steps of 0.01 s at 100 samples: 10,000 samples/s
    speed = steady([1.0, 0.5] + [0.01] * 9, 100, warmup=2, windows=3)
    assert speed.samples_per_s == pytest.approx(10_000)
    assert speed.warmup_s == pytest.approx(1.5) and speed.warmup_steps == 2 and speed.steps == 9
    assert len(speed.windows) == 3 and speed.spread == pytest.approx(0)


def test_windows_give_the_spread_and_the_median():
    speed = steady([0.02] * 3 + [0.01] * 3 + [0.04] * 3, 100, warmup=0, windows=3)
    assert speed.windows == pytest.approx((5_000, 10_000, 2_500))
    assert (speed.samples_per_s, speed.low, speed.high) == pytest.approx((5_000, 2_500, 10_000))
    assert "left out" in str(speed)


def test_uneven_batches_count_their_samples():
    speed = steady([0.01, 0.01, 0.01, 0.01], [100, 100, 100, 36], warmup=0, windows=2)
    assert speed.windows == pytest.approx((10_000, 6_800))


@pytest.mark.parametrize("args", [([0.1] * 3, 10, 2, 3), ([0.1] * 3, [1, 2], 0, 1), ([0.1], 1, -1, 1)])
def test_too_short_or_mismatched_runs_are_one_line(args):
    with pytest.raises(HetlabError) as err:
        steady(*args[:2], warmup=args[2], windows=args[3])
    assert "\n" not in str(err.value)
