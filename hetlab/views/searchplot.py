"""The timeline of a hyperparameter search: which machine ran which trial, when (notebook 09).

One row per machine, one bar per span of a trial (a trial retried on the other machine
after its own was lost has two), numbered by trial, from the driver's clock. A gap in a
row is a machine without work: the sum of the machines is reached only where no row has
gaps. Returns a matplotlib ``Figure`` without pyplot, as ``hetlab.views.plots`` does.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from hetlab.views import plots  # noqa: F401 - lets Jupyter draw a returned Figure

STATUS_COLOURS = {"done": "tab:green", "stopped early": "tab:orange", "failed": "tab:red"}


def trial_timeline(*results, titles=None) -> Figure:
    """One panel per ``SearchResult`` (e.g. the desktop alone, then the pair), on one time axis."""
    titles = list(titles or [" + ".join(r.roles) for r in results])
    fig = Figure(figsize=(9, 1.2 + 1.1 * sum(max(1, len(_machines(r))) for r in results)))
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False,
                        height_ratios=[max(1, len(_machines(r))) for r in results])[:, 0]
    for ax, result, title in zip(axes, results, titles):
        machines = _machines(result)
        for t in result.trials:
            colour = STATUS_COLOURS.get(t.status, "lightgrey")
            for machine, start, end in t.spans:
                if machine not in machines:
                    continue
                y = machines.index(machine)
                ax.barh(y, max(end - start, 0.05), left=start, height=0.6, color=colour, edgecolor="black")
                ax.text(start + (end - start) / 2, y, str(t.trial), ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(machines)), machines)
        ax.set_ylim(-0.6, len(machines) - 0.4)
        ax.axvline(result.wall_s, color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{title}: {result.summary()}", fontsize=9)
    axes[-1].set_xlabel("seconds since the search started (dashed: its end); green done, orange "
                        "stopped early by ASHA, red failed")
    fig.tight_layout()
    return fig


def _machines(result) -> list[str]:
    found = []
    for t in result.trials:
        for machine, _, _ in t.spans:
            if machine and machine not in found:
                found.append(machine)
    return sorted(found, key=lambda m: (not m.startswith("desktop"), m))
