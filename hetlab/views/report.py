"""The learner's hand-in (``hetlab report``, notebook 09's last cell): one Markdown page with its plots.

Written from the small files that notebooks 02, 05, 06, 08 and 09 saved in ``measured/``
(``hetlab.arithmetic.measured``): each device's step line over its sweep, the engine's cost per
exchange and the link, the tuned split and its efficiency, each prediction beside what the run
measured, and the search's pair ÷ sum. Every figure says measured (machine, date), estimated, or
simulated. No token and no address goes in: addresses that slip into a host name are left out.
"""
from __future__ import annotations

import datetime
import re
from pathlib import Path

from hetlab.arithmetic import measured
from hetlab.errors import HetlabError

ROLES = ("desktop", "mac")
NOTEBOOKS = ("05", "06", "08", "09")
SIMULATED = "simulated: the practice cluster, where the mac is this machine slowed down"
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\b[0-9a-fA-F]{32,}\b")


def clean(text: str) -> str:
    """``text`` with anything that looks like an IP address or a token left out."""
    return _ADDRESS.sub("(left out)", str(text))


def run_label(run: dict) -> str:
    """"measured on HOST, DATE", and "simulated: …" where the run had a simulated machine."""
    label = f"measured on {run.get('host', '?')}, {str(run.get('date', ''))[:10]}"
    return clean(f"{label}; {SIMULATED}" if run.get("simulated") else label)


def _plot(path: Path, draw) -> None:
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _figure(lines: list, out: Path, name: str, title: str, label: str, draw) -> None:
    _plot(out / f"{name}.png", draw)
    lines += [f"![{title} ({label})]({name}.png)", "", f"*{title}: {label}.*", ""]


def _steps(lines: list, out: Path, where) -> None:
    lines += ["## Each device's step over its sweep (notebook 02)", ""]
    rows, labels = [], []
    sweeps = {role: measured.load(role, where) for role in ROLES}

    def draw(ax):
        for role in ROLES:
            line = measured.step_time(role, "small", where)
            data = sweeps[role]
            sizes = data["batch_sizes"] if data else list(measured.SWEEP_BATCHES)
            if data and "small" in data["samples_per_s"]:
                dots = ax.plot(sizes, [1e3 * b / s for b, s in zip(sizes, data["samples_per_s"]["small"])], "o",
                               label=f"{role}, measured")
                color = dots[0].get_color()
            else:
                color = None
            ax.plot(sizes, [1e3 * line(b) for b in sizes], "--" if not line.source.startswith("measured") else "-",
                    color=color, label=f"{role}, {'fitted' if line.source.startswith('measured') else 'estimated'}")
        ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms per step (small CNN)",
               title="Step time: t(b) = t₀ + b/T")
        ax.legend(fontsize=8)

    for role in ROLES:
        line = measured.step_time(role, "small", where)
        labels.append(f"{role}: {line.source}")
        rows.append(f"| {role} | {line.fixed_s * 1e3:.2f} ms | {line.per_sample_s * 1e6:.2f} µs | "
                    f"{line.samples_per_s(128):,.0f} | {clean(line.source)} |")
    _figure(lines, out, "steps", "Step time over the sweep", clean("; ".join(labels)), draw)
    lines += ["| device | t₀ | per sample | samples/s at batch 128 | source |", "|---|---|---|---|---|", *rows, ""]


def _engine_and_link(lines: list, runs: dict, where) -> None:
    lines += ["## The engine's cost per exchange, and the link (notebooks 05, 08)", ""]
    run = runs.get("05")
    if run and "engine_s" in run["figures"]:
        label = run_label(run)
        lines.append(f"- the engine's own cost: {run['figures']['engine_s'] * 1e3:.2f} ms an exchange ({label})")
        if "link_s" in run["figures"]:
            lines.append(f"- the link adds {run['figures']['link_s'] * 1e3:.2f} ms an exchange ({label})")
    else:
        engine = measured.engine_cost(where)
        lines.append(f"- the engine's own cost: {engine * 1e3:.2f} ms an exchange "
                     f"({clean(engine.source)}; estimated for your pair until notebook 05 runs on it)")
    run = runs.get("08")
    if run:
        f = run["figures"]
        lines.append(f"- bytes per sample over the link: per-step sync {f['sync_bytes_per_sample']:,.0f}, "
                     f"local SGD {f['local_bytes_per_sample']:,.0f} ({run_label(run)})")
    lines.append("")


def _section(lines: list, runs: dict, notebook: str, heading: str) -> dict | None:
    """Open a section on notebook ``notebook``'s run: the run, or None (and a line) if it has none."""
    lines += [f"## {heading} (notebook {notebook})", ""]
    if notebook not in runs:
        lines += [f"Not yet measured: run notebook {notebook}.", ""]
    return runs.get(notebook)


def _split(lines: list, out: Path, runs: dict) -> None:
    if not (run := _section(lines, runs, "06", "The tuned split and its efficiency")):
        return
    f, label = run["figures"], run_label(run)
    split = ":".join(str(int(b)) for b in f["tuned_split"])
    lines += [f"The tuned split (desktop:mac) {split} ran at {f['efficiency_tuned']:.0%} of the sum of the "
              f"workers alone; the equal split at {f['efficiency_equal']:.0%} ({label}).", ""]

    def draw(ax):
        ax.bar(["equal", f"tuned {split}"], [100 * f["efficiency_equal"], 100 * f["efficiency_tuned"]],
               color=["#999999", "#2a7ab0"])
        ax.set(ylabel="efficiency, % of the sum alone", ylim=(0, 110), title="Equal against tuned split")

    _figure(lines, out, "split", "Efficiency of the equal and the tuned split", label, draw)


def _predictions(lines: list, out: Path, runs: dict) -> None:
    lines += ["## What the course predicted, and what your run measured", ""]
    rows = [(nb, name, p, run) for nb, run in sorted(runs.items()) for name, p in run["predictions"].items()]
    if not rows:
        lines += ["No prediction saved yet: notebooks 06, 08 and 09 save theirs.", ""]
        return
    lines += ["| notebook | what | predicted | measured | measured ÷ predicted | how it was predicted | source |",
              "|---|---|---|---|---|---|---|"]
    for nb, name, p, run in rows:
        ratio = p["measured"] / p["predicted"] if p["predicted"] else float("nan")
        lines.append(f"| {nb} | {name} | {p['predicted']:.3g} | {p['measured']:.3g} | {ratio:.2f} | "
                     f"{clean(p['how'])} | {run_label(run)} |")
    lines.append("")
    label = "; ".join(sorted({f"notebook {nb}: {run_label(run)}" for nb, _, _, run in rows}))

    def draw(ax):
        names = [f"{nb}: {name}"[:28] for nb, name, _, _ in rows]
        ratios = [p["measured"] / p["predicted"] for _, _, p, _ in rows]
        ax.barh(names, ratios, color="#2a7ab0")
        ax.axvline(1, color="k", lw=0.8)
        ax.set(xlabel="measured ÷ predicted (1: as predicted)", title="Predictions against measurements")
        ax.tick_params(axis="y", labelsize=7)

    _figure(lines, out, "predictions", "Measured ÷ predicted, each prediction", label, draw)


def _search(lines: list, out: Path, runs: dict) -> None:
    if not (run := _section(lines, runs, "09", "The search: the pair against the sum of its machines")):
        return
    f, label = run["figures"], run_label(run)
    lines += [f"Pair ÷ sum: {f['pair_vs_sum']:.2f}; pair ÷ desktop alone: {f['pair_vs_desktop']:.2f} ({label}).", ""]

    def draw(ax):
        values = [f["desktop_samples_per_s"], f["mac_samples_per_s"],
                  f["desktop_samples_per_s"] + f["mac_samples_per_s"], f["pair_samples_per_s"]]
        ax.bar(["desktop alone", "mac alone", "sum", "pair"], values,
               color=["#2a7ab0", "#e08a2c", "#bbbbbb", "#3a9a5b"])
        ax.set(ylabel="samples/s, the same configurations", title="The same search, three ways")

    _figure(lines, out, "search", "Samples per second of the same search", label, draw)


def write(out: str | Path | None = None, where: str | Path | None = None) -> Path:
    """Write ``report.md`` and its PNGs into ``out`` (default: ``measured/report``) from the figures
    in ``where`` (default: ``measured/``); returns the page's path."""
    source = Path(where) if where is not None else measured.folder()
    target = Path(out) if out is not None else source / "report"
    runs = {nb: run for nb in NOTEBOOKS if (run := measured.load_run(nb, source)) is not None}
    if not runs and all(measured.load(role, source) is None for role in ROLES):
        raise HetlabError(f"nothing measured in {source} yet: run notebook 02 (and 05–09) first, "
                          f"or name the folder with --measured.")
    target.mkdir(parents=True, exist_ok=True)
    lines = ["# What my Mac and my desktop did", "",
             f"Written by `hetlab report` on {datetime.date.today().isoformat()} from the figures the course's "
             "notebooks saved. Every figure says where it comes from: measured (on which machine, when), "
             "estimated (the course's figure, not your machines), or simulated (the practice cluster).", ""]
    _steps(lines, target, source)
    _engine_and_link(lines, runs, source)
    _split(lines, target, runs)
    _predictions(lines, target, runs)
    _search(lines, target, runs)
    page = target / "report.md"
    page.write_text("\n".join(lines), encoding="utf-8")
    return page
