"""The planner against the one real unlike pair measured: an H100 and its own CPU (issue 44).

Pure arithmetic on docs/measured/2026-11-26-h100-pair.json: fed the card's line, the CPU's speed
and fixed cost, the engine's cost and each run's split, the planner predicts each run's samples/s
within its own stated error (``planner.MODEL_ERROR``), and the verdict asks at least that much gain.
"""
import json
from pathlib import Path

from hetlab.arithmetic import planner
from hetlab.arithmetic.steptime import StepTime

RECORD = json.loads((Path(__file__).resolve().parents[1] / "docs/measured/2026-11-26-h100-pair.json").read_text())
PARAMS = 29_066


def _ratios(cpu_fixed_s: float) -> dict:
    card = StepTime(RECORD["card_line"]["fixed_s"], RECORD["card_line"]["per_sample_s"], "card")
    cpu = StepTime(cpu_fixed_s, 1 / RECORD["cpu_samples_per_s"]["value"], "cpu")
    out = {}
    for run in RECORD["runs"]:
        wire = 4 if run["local_steps"] == 1 else 2      # sync sends fp32, local SGD fp16 (planner.advise)
        plan = planner.at_split((card, cpu), run["split"], PARAMS, planner.SAME_MACHINE, run["local_steps"],
                                wire, RECORD["engine_s"]["value"])
        out[run["global_batch"], run["local_steps"]] = run["samples_per_s"] / plan.samples_per_s
    return out


def test_the_planner_predicts_the_h100_pairs_runs_within_its_stated_error():
    ratios = _ratios(RECORD["cpu_fixed_s"]["value"])
    assert len(ratios) == 6
    assert all(abs(r - 1) <= planner.MODEL_ERROR for r in ratios.values()), ratios
    assert planner.MODEL_ERROR <= 0.2 and planner.MIN_GAIN >= 1 + planner.MODEL_ERROR


def test_a_cpu_modelled_without_its_fixed_cost_misses_the_local_sgd_runs():
    """What the old prediction missed: a CPU step's fixed cost at the CPU's small share."""
    ratios = _ratios(0.0)
    assert min(ratios.values()) < 1 - planner.MODEL_ERROR, ratios
