"""hetlab.views.plots: figure structure (bars, legend labels), not pixels."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hetlab.views import plots  # noqa: E402
from hetlab.errors import HetlabError  # noqa: E402
from hetlab.ps import StepRecord  # noqa: E402  (StepRecord is plain data)


def make_records(steps=3, simulated=True):
    """Two workers, equal batches: the mac is 4× slower (3× its compute simulated)."""
    out = []
    for s in range(steps):
        sim = 0.03 if simulated else 0.0
        out.append(StepRecord(s, "desktop", 64, 0.01, 0.0, 0.03, 0.002, 2.0, step_s=0.045))
        out.append(StepRecord(s, "mac", 64, 0.01, sim, 0.0, 0.002, 2.0, step_s=0.045))
    return out


def legend_texts(fig_or_ax):
    legend = fig_or_ax.legends[0] if isinstance(fig_or_ax, Figure) else fig_or_ax.get_legend()
    return [t.get_text() for t in legend.get_texts()]


def test_timeline_draws_one_bar_per_worker_step_and_segment():
    fig = plots.timeline(make_records(), labels={"mac": "mac (simulated 4× slower)"})
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 4 and all(len(c) == 2 * 3 for c in bars)  # 4 segments × (2 workers × 3 steps)
    labels = legend_texts(fig)
    assert any("simulated" in t for t in labels) and "waiting for the straggler" in labels
    assert [t.get_text() for t in ax.get_yticklabels()] == ["desktop", "mac (simulated 4× slower)"]
    hatched = [c for c in bars if c.patches[0].get_hatch()]
    assert len(hatched) == 1 and "simulated" in hatched[0].get_label()
    # steps follow one another: the mac's first bar of step 1 starts where step 0 ended
    mac_step1 = bars[0].patches[3]
    assert mac_step1.get_x() == pytest.approx(0.045)


def test_timeline_without_simulation_has_no_simulated_legend_entry():
    fig = plots.timeline(make_records(simulated=False))
    assert not any("simulated" in t for t in legend_texts(fig))


def test_curves_one_run_or_a_comparison():
    assert len(plots.curves([2.3, 1.0, 0.5]).axes[0].lines) == 1
    fig = plots.curves({"1 device": [2.3, 0.9], "PS": [2.2, 0.95]})
    assert fig.axes[0].get_xlabel() == "step" and legend_texts(fig.axes[0]) == ["1 device", "PS"]
    with pytest.raises(HetlabError, match="nothing to plot"):
        plots.curves([])
    with pytest.raises(HetlabError):
        plots.timeline([])


def test_step_loss_weights_each_worker_by_its_samples():
    records = [StepRecord(1, "a", 48, 0, 0, 0, 0, 1.0, samples=48), StepRecord(1, "b", 16, 0, 0, 0, 0, 3.0, samples=16),
               StepRecord(2, "a", 48, 0, 0, 0, 0, 0.5, samples=48), StepRecord(2, "b", 16, 0, 0, 0, 0, 0.5, samples=16)]
    assert plots.step_loss(records) == [pytest.approx(1.5), pytest.approx(0.5)]


# notebook 05's picture of one step shows the numbers it is computed from

SMALL_CNN = 29_066  # hetlab.core.models.count_params(make_model("small"))


def all_text(fig):
    """Every string drawn on the figure: axes texts, tick labels, titles."""
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text())


def test_ps_round_trip_numbers_its_steps_and_shows_the_weights_and_bytes():
    fig = plots.ps_round_trip([48, 16], params=SMALL_CNN)
    assert isinstance(fig, Figure)
    text = all_text(fig)
    for step in ("1 · weights w ↓", "2 · gradient g_desktop ↑", "2 · gradient g_mac ↑", "3 · combine",
                 "4 · optimizer step"):
        assert step in text
    assert "(48/64)·g_desktop + (16/64)·g_mac" in text and "b_mac = 16 samples" in text
    assert f"{SMALL_CNN * 4:,} B" in text                     # 116,264 B each way in fp32
    with pytest.raises(HetlabError, match="two batch sizes"):
        plots.ps_round_trip([48])
