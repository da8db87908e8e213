"""Pictures of where the time goes, of training progress (notebooks 05, 06), of one parameter-server
step (``ps_round_trip``, notebook 05) and of a search's trials on each machine over time
(``trial_timeline``, notebook 09).

Every function returns a matplotlib ``Figure`` built without pyplot, so nothing is
drawn behind your back: a notebook shows it as the cell's value, a script saves it
with ``fig.savefig``. Time a *simulated* slower device spends sleeping is drawn
hatched and labelled "simulated", never passed off as real compute.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from hetlab.arithmetic import planner
from hetlab.errors import HetlabError


def _show_figures_in_notebooks() -> None:
    """Let Jupyter draw a returned Figure as a picture (without pyplot it shows only text)."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "display_formatter"):
        select_figure_formats(shell, {"png"})


_show_figures_in_notebooks()

# segment key, legend label, colour, hatch: in the order they are drawn within a step
SEGMENTS = (
    ("compute_s", "compute", "tab:blue", None),
    ("simulated_s", "simulated slowdown (sleep, not real compute)", "tab:blue", "///"),
    ("comm_s", "communication", "tab:orange", None),
    ("wait_s", "waiting for the straggler", "lightgrey", None),
)


def timeline(records: Sequence, labels: Mapping[str, str] | None = None,
             title: str = "Where each step's time goes, per worker") -> Figure:
    """Per-worker horizontal bars, step after step: compute / simulated / comm / wait.

    ``records`` are ``StepRecord``s; ``labels`` maps worker names to the names shown. A step starts
    where the previous one ended (its ``step_s`` when recorded, else its longest worker).
    """
    records = list(records)
    if not records:
        raise HetlabError("no step records to plot: run some steps first, e.g. training.run(5).")
    names = list(dict.fromkeys(r.worker for r in records))
    start, t = {}, 0.0
    for s in sorted({r.step for r in records}):
        start[s] = t
        mine = [r for r in records if r.step == s]
        longest = max(sum(getattr(r, k) for k, *_ in SEGMENTS) for r in mine)
        t += max(getattr(mine[0], "step_s", 0.0) or 0.0, longest)
    fig = Figure(figsize=(9, 1.6 + 0.6 * len(names)), layout="constrained")
    ax = fig.add_subplot()
    lefts = [start[r.step] for r in records]
    for key, label, colour, hatch in SEGMENTS:     # "simulated" stays out of the legend when nothing was
        widths = [getattr(r, key) for r in records]
        if key == "simulated_s" and not any(w > 0 for w in widths):
            label = "_" + label
        ax.barh([names.index(r.worker) for r in records], widths, left=lefts, height=0.6, color=colour,
                hatch=hatch, edgecolor="white" if hatch is None else "navy", linewidth=0.5, label=label)
        lefts = [a + b for a, b in zip(lefts, widths)]
    for s in sorted(start)[1:]:
        ax.axvline(start[s], color="black", linewidth=0.5, alpha=0.3)
    ax.set_yticks(range(len(names)), [(labels or {}).get(n, n) for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first step started")
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    return fig


def curves(loss: Sequence[float] | Mapping[str, Sequence[float]]) -> Figure:
    """The training loss, step by step; pass a dict to compare runs, e.g. {"1 device": …, "PS": …}."""
    series = loss if isinstance(loss, Mapping) else {"loss": loss}
    if not series or not all(len(ys) for ys in series.values()):
        raise HetlabError("nothing to plot: pass the losses, e.g. curves(hist.loss).")
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    for label, ys in series.items():
        ax.plot(range(1, len(ys) + 1), list(ys), label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if isinstance(loss, Mapping):
        ax.legend(fontsize=8)
    return fig


def step_loss(records: Sequence) -> list[float]:
    """Each step's training loss: the workers' losses weighted by their samples (notebook 05)."""
    steps: dict[int, tuple[float, int]] = {}
    for r in records:
        n = getattr(r, "samples", 0) or r.batch_size
        total, count = steps.get(r.step, (0.0, 0))
        steps[r.step] = (total + r.loss * n, count + n)
    return [total / count for _, (total, count) in sorted(steps.items())]


# --- one parameter-server step, drawn (notebook 05): every number from the arguments ----------------

def _box(ax, x, y, w, h, text, colour, fontsize=9):
    """A rounded box centred on (x, y) with centred text."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor=colour, edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, colour):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.6,
                                                          mutation_scale=14, shrinkA=0, shrinkB=0))


def ps_round_trip(batch_sizes: Sequence[int] = (48, 16), params: int | None = None) -> Figure:
    """One synchronous parameter-server step of the pair, numbered 1–4 (notebook 05, section 3).

    1 the server's weights go down to every worker; 2 each worker sends back the mean gradient
    of its own b_i samples; 3 the server combines Σ (b_i/B)·g_i; 4 one optimizer step (Adam)
    gives the weights of the next round. With ``params`` each arrow says how many bytes it
    carries (fp32, as hetlab sends them by default).
    """
    sizes, names = [int(b) for b in batch_sizes], ("desktop", "mac")
    if len(sizes) != 2 or min(sizes) < 1:
        raise HetlabError(f"give two batch sizes ≥ 1, the desktop's and the mac's, got {list(batch_sizes)}.")
    total = sum(sizes)
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.add_subplot()
    width, height = 12.0, 7.4
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    terms = " + ".join(f"({b}/{total})·g_{n}" for b, n in zip(sizes, names))
    _box(ax, width / 2, 6.2, 8.4, 1.8,
         "parameter server (in the driver's process: your notebook)\nholds the weights w and Adam's state\n"
         f"3 · combine: g = Σ (b_i/B)·g_i = {terms}\n"
         "4 · optimizer step: w ← Adam(w, g), the next round's weights",
         "#dbe9f6", fontsize=10)
    for x, b, name in zip((2.6, width - 2.6), sizes, names):
        _box(ax, x, 1.6, 3.6, 1.5, f"{name} worker (its own device)\nforward + backward\non its b_{name} = {b} "
             f"samples → g_{name},\ntheir mean gradient", "#fde9d3", fontsize=10)
        side = -1 if x <= width / 2 else 1          # weights on the outer side, gradient on the inner
        down_x, up_x = x + side * 0.5, x - side * 0.5
        _arrow(ax, (down_x, 5.25), (down_x, 2.4), "tab:blue")
        _arrow(ax, (up_x, 2.4), (up_x, 5.25), "tab:orange")
        ax.text(down_x + side * 0.15, 3.85, "1 · weights w ↓", ha="left" if side > 0 else "right", va="center",
                fontsize=10, color="tab:blue")
        ax.text(up_x - side * 0.15, 3.85, f"2 · gradient g_{name} ↑\n(b_{name} = {b} samples)",
                ha="right" if side > 0 else "left", va="center", fontsize=10, color="tab:orange")
    carried = ""
    if params:
        sent = params * planner.BYTES_PER_VALUE["fp32"]
        carried = f"Each arrow carries P = {params:,} values × 4 B (fp32) = {sent:,} B ({sent / 1e3:,.1f} kB) per step. "
    ax.text(width / 2, 0.05, f"B = Σ b_i = {total}. {carried}\nSynchronous: step 3 waits for every gradient, so "
            "the slowest worker sets the pace; then the round starts again at 1.", ha="center", va="bottom",
            fontsize=9.5)
    fig.suptitle("The parameter server's round trip: one synchronous step", fontsize=12)
    return fig


# --- a hyperparameter search's timeline (notebook 09) -------------------------------------------
# One row per machine, one bar per span of a trial (a trial retried on the other machine after its
# own was lost has two), numbered by trial, from the driver's clock. A gap in a row is a machine
# without work: the sum of the machines is reached only where no row has gaps.

STATUS_COLOURS = {"done": "tab:green", "stopped early": "tab:orange", "failed": "tab:red"}


def trial_timeline(*results, titles=None) -> Figure:
    """One panel per ``SearchResult`` (e.g. the desktop alone, then the pair), on one time axis."""
    titles = list(titles or [" + ".join(r.roles) for r in results])
    rows = [sorted({m for t in r.trials for m, _, _ in t.spans if m}, key=lambda m: (not m.startswith("desktop"), m))
            for r in results]
    fig = Figure(figsize=(9, 1.2 + 1.1 * sum(max(1, len(machines)) for machines in rows)))
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False,
                        height_ratios=[max(1, len(machines)) for machines in rows])[:, 0]
    for ax, result, title, machines in zip(axes, results, titles, rows):
        for t in result.trials:
            for machine, start, end in t.spans:
                if machine in machines:
                    y = machines.index(machine)
                    ax.barh(y, max(end - start, 0.05), left=start, height=0.6,
                            color=STATUS_COLOURS.get(t.status, "lightgrey"), edgecolor="black")
                    ax.text(start + (end - start) / 2, y, str(t.trial), ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(machines)), machines)
        ax.set_ylim(-0.6, len(machines) - 0.4)
        ax.axvline(result.wall_s, color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{title}: {result.summary()}", fontsize=9)
    axes[-1].set_xlabel("seconds since the search started (dashed: its end); green done, orange "
                        "stopped early by ASHA, red failed")
    fig.tight_layout()
    return fig
