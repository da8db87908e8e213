"""Each formula of a step's arithmetic has one home (``hetlab.arithmetic.steptime``), and a step time
is a ``StepTime`` everywhere (issue 58). What still needs a guard: the step records' lines and the
pair's balance point, against steptime on random lines. Pure Python: a second in all."""
import random

import pytest

from hetlab.arithmetic import balance, estimates, steptime
from hetlab.arithmetic.steptime import StepTime
from hetlab.errors import HetlabError
from harness.gpucheck.pair import step_budget
from hetlab.ps.records import StepRecord, worker_steps

CASES = 200


def random_lines(rng: random.Random, n: int, flat: bool = False) -> list[StepTime]:
    lines = [StepTime(rng.uniform(0, 0.04), rng.uniform(20e-6, 3e-3)) for _ in range(n)]
    if flat:
        lines[rng.randrange(n)] = StepTime(rng.uniform(1e-3, 0.04), 0.0, "flat")
    return lines


@pytest.fixture
def rng():
    return random.Random(51)


def test_every_finish_together_split_is_the_one_of_steptime(rng):
    """balance's split and step_budget's balanced step both read ``steptime.finish_together``,
    flat devices included."""
    for case in range(CASES):
        lines, batch = random_lines(rng, rng.choice((2, 3)), flat=case % 4 == 0), rng.choice((64, 256, 1024))
        finish, shares = steptime.finish_together(batch, lines)
        assert sum(shares) == pytest.approx(batch)
        expected = balance.split_batch(batch, [max(b, 1e-9) for b in shares])
        assert balance.equal_finish_split(batch, lines) == expected
        positive = [line(b) for line, b in zip(lines, shares) if b > 0]
        assert max(positive) == pytest.approx(finish) and min(positive) == pytest.approx(finish)


def test_a_flat_device_has_one_meaning(rng):
    """A step that does not grow with the batch: it takes what the others cannot finish by its
    fixed time, everywhere (balance clamped it to 1e-12 s a sample before)."""
    card, cpu = StepTime(0.01, 0.0, "flat card"), StepTime(0.002, 1e-4, "cpu")
    finish, shares = steptime.finish_together(1000, [card, cpu])
    assert finish == 0.01 and shares == pytest.approx([920, 80])
    assert balance.equal_finish_split(1000, [card, cpu]) == [920, 80]
    assert steptime.ceiling(card, cpu, 1000) == 1.0     # a share given away saves the flat card nothing


def test_a_step_time_needs_a_line_for_every_worker(rng):
    for _ in range(CASES):
        lines = random_lines(rng, rng.choice((2, 3)))
        sizes = [rng.randint(1, 512) for _ in lines]
        with pytest.raises(HetlabError, match="step lines for"):
            steptime.predicted_efficiency(lines, sizes + [1])


def test_pair_over_sum_is_one_function(rng):
    """Notebook 09's pair ÷ sum and notebook 06's efficiency: one division."""
    for _ in range(CASES):
        desktop, mac, pair = (rng.uniform(100, 20000) for _ in range(3))
        one = steptime.efficiency(pair, [desktop, mac])
        assert balance.efficiency(pair, [desktop, mac]) == one


def test_the_in_step_speed_and_the_budget_read_the_same_lines(rng):
    """From random step records: a worker's line (its messages, then b ÷ its device) is the
    one ``step_budget`` balances with, and ``back_s`` is its mean time until the gradient is back."""
    for _ in range(50):
        records, lines = [], random_lines(rng, 2)
        sizes = [rng.randint(8, 128) for _ in lines]
        for step in range(4):
            for name, line, b in zip(("desktop", "mac"), lines, sizes):
                compute = line.per_sample_s * b * rng.uniform(0.9, 1.1)
                records.append(StepRecord(step, name, b, compute, 0.0, 0.0, line.fixed_s, 2.0, step_s=0.5))
        seen = {n: worker_steps(r for r in records if r.worker == n) for n in ("desktop", "mac")}
        budget = step_budget(records)
        balanced, _ = steptime.finish_together(sum(sizes), [s.line for s in seen.values()])
        assert budget.ideal + budget.split + budget.noise + budget.overhead == pytest.approx(budget.step)
        assert budget.split == pytest.approx(max(s.back_s for s in seen.values()) - balanced, abs=1e-12)
        for n, s in seen.items():
            mine = [r for r in records if r.worker == n]
            assert s.back_s == pytest.approx(sum(r.device_s + r.comm_s for r in mine) / len(mine))


def test_the_estimates_rest_on_the_h100_line_through_both_anchors():
    h100 = estimates.H100_LINE
    for batch, samples_per_s in estimates.H100_TRAIN.items():
        assert batch / h100(batch) == pytest.approx(samples_per_s)
    assert estimates.STEP["small"]["desktop"].fixed_s == h100.fixed_s


def test_a_devices_seconds_are_one_sum_in_every_engine(rng):
    """The parameter server's records and Ray Train's rank reports (notebook 07's "busy") add a
    device's compute and its simulated sleep the same way."""
    from hetlab.raytrain.loop import RankReport
    for _ in range(CASES):
        compute, simulated = rng.uniform(0, 2), rng.choice((0.0, rng.uniform(0, 6)))
        record = StepRecord(0, "mac", 32, compute, simulated, 0.0, 0.01, 2.0)
        rank = RankReport(1, "mac", "mac", "node", "cpu", 32, 100.0, 320, compute, simulated, 0.5, "sha")
        assert record.device_s == rank.device_s == compute + simulated
