"""hetlab.balance: batch splitting (pure arithmetic) and auto-tuning (synthetic and real)."""
import math
import random

import pytest

from hetlab.balance import check_weights, ratio_of, split_batch
from hetlab.errors import HetlabError


@pytest.mark.parametrize("global_batch, weights, expected", [
    (64, [4, 1], [51, 13]),          # 51.2 / 12.8 → floors 51 + 12, the leftover to the .8
    (64, [1, 1], [32, 32]),
    (10, [1, 1, 1], [4, 3, 3]),      # ties: the leftover goes to the first worker
    (100, [0.5, 0.3, 0.2], [50, 30, 20]),
    (3, [1000, 1, 1], [1, 1, 1]),    # every worker keeps at least one sample
    (5, [1e-9, 1], [1, 4]),
    (128, [3000.0, 1000.0], [96, 32]),  # measured throughputs work as weights
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
        quotas = [g * w / sum(weights) for w in weights]
        if all(q >= 1 for q in quotas):  # no minimum-one bump: largest remainder is within 1
            assert all(abs(s - q) < 1 for s, q in zip(sizes, quotas))


def test_split_batch_makes_workers_finish_together():
    speeds = [4000.0, 1000.0]  # samples/s: a fast and a 4× slower worker
    sizes = split_batch(500, speeds)
    times = [b / t for b, t in zip(sizes, speeds)]
    assert sizes == [400, 100] and times[0] == pytest.approx(times[1])


def test_ratio_of():
    assert ratio_of([48, 16]) == [0.75, 0.25]


@pytest.mark.parametrize("global_batch, weights, n, words", [
    (64, [1, -1], None, "positive"),
    (64, [1, 0], None, "positive"),
    (64, [0, 0], None, "positive"),
    (64, [1, float("nan")], None, "finite"),
    (64, [1, float("inf")], None, "finite"),
    (64, [1, 2, 3], 2, "3 entries but there are 2 workers"),
    (64, [], None, "empty"),
    (64, "4:1", None, "list of numbers"),
    (64, [1, "a"], None, "number"),
    (1, [1, 1], None, "smaller than the number of workers (2)"),
    (0, [1], None, "number of workers (1)"),
    (-5, [1], None, "smaller"),
    (64.5, [1], None, "whole number"),
])
def test_split_batch_rejects_bad_input_with_one_line(global_batch, weights, n, words):
    with pytest.raises(HetlabError) as err:
        split_batch(global_batch, weights, n=n)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_check_weights_accepts_numbers_and_returns_floats():
    assert check_weights((3, 1.5), n=2) == [3.0, 1.5]
    assert all(isinstance(w, float) for w in check_weights([1, 2]))
    assert not math.isnan(sum(check_weights([1e-12, 1e12])))
