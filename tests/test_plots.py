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


def test_time_split_and_throughput_panels():
    fig = plots.time_split(make_records(), samples_per_s=[2000.0, 3500.0], run_labels=["64:64", "102:26"])
    ax, ax_rate = fig.axes
    assert sum(len(c) for c in ax.containers) == 4 * 2
    assert any("simulated" in t for t in legend_texts(fig))
    assert list(ax_rate.lines[0].get_ydata()) == [2000.0, 3500.0]


def test_speed_vs_share_sorts_points_and_marks_choices():
    fig = plots.speed_vs_share([0.8, 0.5, 0.75], [4000, 2000, 3600], efficiency=[0.9, 0.45, 0.8],
                               marks={"equal": 0.5, "tuned": 0.8})
    ax = fig.axes[0]
    assert list(ax.lines[0].get_xdata()) == [0.5, 0.75, 0.8]
    assert list(ax.lines[0].get_ydata()) == [2000, 3600, 4000]
    texts = legend_texts(ax)
    assert "efficiency (measured)" in texts and "tuned (80%)" in texts and "equal (50%)" in texts
    with pytest.raises(HetlabError, match="one samples/s value and one efficiency per share"):
        plots.speed_vs_share([0.5, 0.6], [1.0], [0.5])


def test_curves_one_or_two_panels_and_comparisons():
    fig = plots.curves(loss=[2.3, 1.0, 0.5], accuracy={"1 device": [0.9, 0.95], "PS": [0.91, 0.95]})
    assert len(fig.axes) == 2
    assert len(fig.axes[0].lines) == 1 and len(fig.axes[1].lines) == 2
    assert [ax.get_xlabel() for ax in fig.axes] == ["step", "epoch"]
    assert legend_texts(fig.axes[1]) == ["1 device", "PS"]
    assert len(plots.curves(accuracy=[0.9]).axes) == 1
    with pytest.raises(HetlabError):
        plots.curves()
    with pytest.raises(HetlabError):
        plots.timeline([])


def test_step_loss_weights_each_worker_by_its_samples():
    records = [StepRecord(1, "a", 48, 0, 0, 0, 0, 1.0, samples=48), StepRecord(1, "b", 16, 0, 0, 0, 0, 3.0, samples=16),
               StepRecord(2, "a", 48, 0, 0, 0, 0, 0.5, samples=48), StepRecord(2, "b", 16, 0, 0, 0, 0, 0.5, samples=16)]
    assert plots.step_loss(records) == [pytest.approx(1.5), pytest.approx(0.5)]


# hetlab.views.diagrams: the pictures of notebooks 05 and 08 show the numbers they are computed from

from hetlab.views import diagrams  # noqa: E402
from hetlab.arithmetic import planner, steptime  # noqa: E402
from hetlab.store import measured  # noqa: E402

SMALL_CNN = 29_066  # hetlab.core.models.count_params(make_model("small"))


def all_text(fig):
    """Every string drawn on the figure: axes texts, tick labels, titles."""
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text())


def test_ps_round_trip_numbers_its_steps_and_shows_the_weights_and_bytes():
    fig = diagrams.ps_round_trip([48, 16], params=SMALL_CNN)
    assert isinstance(fig, Figure)
    text = all_text(fig)
    for step in ("1 · weights w ↓", "2 · gradient g_desktop ↑", "2 · gradient g_mac ↑", "3 · combine",
                 "4 · optimizer step"):
        assert step in text
    assert "(48/64)·g_desktop + (16/64)·g_mac" in text and "b_mac = 16 samples" in text
    assert f"{SMALL_CNN * 4:,} B" in text                     # 116,264 B each way in fp32
    with pytest.raises(HetlabError, match="two batch sizes"):
        diagrams.ps_round_trip([48])


def test_bandwidth_arithmetic_draws_the_planners_numbers():
    d, m = pair = planner.assumed_devices("small")
    fig = diagrams.bandwidth_arithmetic(SMALL_CNN, (planner.WIFI, planner.GIGABIT), pair, 128, local_steps=8)
    engine = planner.engine_or_default(measured.engine_cost())       # nothing saved in a test: the course's figure
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    bars = [p.get_width() for c in ax.containers for p in c]
    wifi, gigabit = (planner.exchange_seconds(SMALL_CNN, link) for link in (planner.WIFI, planner.GIGABIT))
    wifi16 = planner.exchange_seconds(SMALL_CNN, planner.WIFI, 2)
    assert bars[:4] == pytest.approx([d(128) * 1e3, m(128) * 1e3, engine * 1e3, wifi * 1e3])
    assert bars[4] == pytest.approx(wifi16 / 8 * 1e3)          # local SGD: the exchange divided by H
    assert bars[5] == pytest.approx(gigabit * 1e3)
    assert ax.lines[0].get_xdata()[0] == pytest.approx(d(128) * 1e3)   # the desktop's whole step
    text = all_text(fig)
    for value_bytes in (4, 2):                                  # per-step sync fp32, local SGD fp16
        assert f"{planner.exchange_bytes(SMALL_CNN, value_bytes):,} B" in text
    assert f"{wifi * 1e3:,.2f} ms" in text and "the Mac is left out" in text and "estimated" in text
    one = diagrams.bandwidth_arithmetic(1_000, [planner.GIGABIT], (steptime.constant_speed(1_000.0), steptime.constant_speed(500.0)))
    assert len([p for c in one.axes[0].containers for p in c]) == 5
    with pytest.raises(HetlabError):
        diagrams.bandwidth_arithmetic(1_000, [], planner.assumed_devices())
