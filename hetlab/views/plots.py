"""Pictures of where the time goes, of training progress (notebooks 05, 06) and of a search's
trials on each machine over time (``trial_timeline``, notebook 09).

Every function returns a matplotlib ``Figure`` built without pyplot, so nothing is
drawn behind your back: a notebook shows it as the cell's value, a script saves it
with ``fig.savefig``. Time a *simulated* slower device spends sleeping is drawn
hatched and labelled "simulated", never passed off as real compute.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure

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


def _workers(records) -> list[str]:
    return list(dict.fromkeys(r.worker for r in records))


def _stack(ax, rows: list, lefts: list, widths_of) -> None:
    """Draw ``SEGMENTS`` one after another on ``ax``'s horizontal rows ``rows`` from ``lefts``;
    ``widths_of(key)`` gives each row's seconds of that segment. "simulated" stays out of the
    legend when nothing was simulated."""
    for key, label, colour, hatch in SEGMENTS:
        widths = widths_of(key)
        if key == "simulated_s" and not any(w > 0 for w in widths):
            label = "_" + label
        ax.barh(rows, widths, left=lefts, height=0.6, color=colour, hatch=hatch,
                edgecolor="white" if hatch is None else "navy", linewidth=0.5, label=label)
        lefts = [a + b for a, b in zip(lefts, widths)]


def _worker_axis(ax, names: list, labels: Mapping[str, str] | None) -> None:
    ax.set_yticks(range(len(names)), [(labels or {}).get(n, n) for n in names])
    ax.invert_yaxis()


def timeline(records: Sequence, labels: Mapping[str, str] | None = None,
             title: str = "Where each step's time goes, per worker") -> Figure:
    """Per-worker horizontal bars, step after step: compute / simulated / comm / wait.

    ``records`` are ``StepRecord``s (notebook 05). ``labels`` maps worker names to the
    names shown (e.g. ``{"mac": "mac (simulated 4× slower)"}``). A step starts where
    the previous one ended (its ``step_s`` when recorded, else its longest worker).
    """
    records = list(records)
    if not records:
        raise HetlabError("no step records to plot: run some steps first, e.g. training.run(5).")
    names = _workers(records)
    start, t = {}, 0.0
    for s in sorted({r.step for r in records}):
        start[s] = t
        mine = [r for r in records if r.step == s]
        longest = max(sum(getattr(r, k) for k, *_ in SEGMENTS) for r in mine)
        t += max(getattr(mine[0], "step_s", 0.0) or 0.0, longest)
    fig = Figure(figsize=(9, 1.6 + 0.6 * len(names)), layout="constrained")
    ax = fig.add_subplot()
    _stack(ax, [names.index(r.worker) for r in records], [start[r.step] for r in records],
           lambda key: [getattr(r, key) for r in records])
    for s in sorted(start)[1:]:
        ax.axvline(start[s], color="black", linewidth=0.5, alpha=0.3)
    _worker_axis(ax, names, labels)
    ax.set_xlabel("seconds since the first step started")
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    return fig


def time_split(records: Sequence, labels: Mapping[str, str] | None = None,
               samples_per_s: Sequence[float] = (), run_labels: Sequence[str] = ()) -> Figure:
    """Mean seconds per step of each worker split into compute / simulated / comm / wait,
    and, on the right, the cluster samples/s of each run so far (notebook 06's tuner)."""
    records = list(records)
    if not records:
        raise HetlabError("no step records to plot: run some steps first.")
    names = _workers(records)
    fig = Figure(figsize=(10, 2.0 + 0.5 * len(names)), layout="constrained")
    ax, ax_speed = fig.subplots(1, 2, width_ratios=(2, 1))

    def means(key):
        return [sum(getattr(r, key) for r in mine) / len(mine)
                for mine in ([r for r in records if r.worker == name] for name in names)]

    _stack(ax, list(range(len(names))), [0.0] * len(names), means)
    _worker_axis(ax, names, labels)
    ax.set_xlabel("mean seconds per step")
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    speeds = list(samples_per_s)
    ax_speed.plot(range(1, len(speeds) + 1), speeds, "o-")
    if run_labels:
        ax_speed.set_xticks(range(1, len(speeds) + 1), list(run_labels), rotation=30, fontsize=7)
    ax_speed.set_xlabel("run")
    ax_speed.set_ylabel("cluster samples/s")
    ax_speed.set_ylim(bottom=0)
    return fig


def speed_vs_share(shares: Sequence[float], samples_per_s: Sequence[float], efficiency: Sequence[float],
                   marks: Mapping[str, float] | None = None) -> Figure:
    """Cluster samples/s and efficiency (right axis) against the fast worker's share, its fraction
    of the global batch (notebook 06). ``marks`` draws labelled vertical lines, e.g. ``{"tuned": 0.8}``."""
    xs, ys, eff = list(shares), list(samples_per_s), list(efficiency)
    if not xs or not len(xs) == len(ys) == len(eff):
        raise HetlabError(f"need one samples/s value and one efficiency per share, got {len(ys)} and {len(eff)} "
                          f"for {len(xs)} shares.")
    order = sorted(range(len(xs)), key=xs.__getitem__)
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([xs[i] for i in order], [ys[i] for i in order], "o-", color="tab:blue",
            label="cluster samples/s (measured)")
    ax.set_xlabel("share of the global batch on the fast worker")
    ax.set_ylabel("cluster samples/s")
    ax.set_ylim(bottom=0)
    ax_eff = ax.twinx()
    ax_eff.plot([xs[i] for i in order], [eff[i] for i in order], "s--", color="tab:green",
                label="efficiency (measured)")
    ax_eff.set_ylabel("efficiency")
    ax_eff.set_ylim(0, 1.05)
    handles, names = (a + b for a, b in zip(ax.get_legend_handles_labels(), ax_eff.get_legend_handles_labels()))
    for (name, x), colour in zip((marks or {}).items(), ("tab:red", "tab:purple", "tab:brown")):
        handles.append(ax.axvline(x, color=colour, linestyle=":"))
        names.append(f"{name} ({x:.0%})")
    ax.legend(handles, names, fontsize=8, loc="lower center")
    ax.set_title("Samples/s against the fast worker's share")
    return fig


def curves(loss: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
           accuracy: Sequence[float] | Mapping[str, Sequence[float]] | None = None) -> Figure:
    """Loss and/or accuracy curves; pass a dict to compare runs, e.g. {"1 device": …, "PS": …}."""
    panels = [(n, v, x) for n, v, x in (("loss", loss, "step"), ("accuracy", accuracy, "epoch"))
              if v is not None]
    if not panels:
        raise HetlabError("nothing to plot: pass loss=[...] and/or accuracy=[...].")
    fig = Figure(figsize=(5 * len(panels), 3.5), layout="constrained")
    for ax, (name, values, xlabel) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        series = values if isinstance(values, Mapping) else {name: values}
        for label, ys in series.items():
            ys = list(ys)
            ax.plot(range(1, len(ys) + 1), ys, marker="o" if len(ys) < 20 else None, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        if isinstance(values, Mapping):
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
