"""The learner's hand-in (``hetlab report``, notebook 09's last cell), from what the notebooks saved.

The machines (read on each), the link (through Ray), each machine alone (01, 02), each technique on the
pair (05, 07, 08) with its conditions, 06's split, 09's search, every prediction beside a measurement of
the same thing (``reportclaims``), the graded exercises (``reportwork``), the learner's words and answers
(``reportwords``, kept across rewrites). Each speed: a median, its spread, the warm-up left out
(``arithmetic.steady``); each figure: where it came from. Beside ``report.md``: its PNGs, ``report.html``
and ``figures.csv`` (``reportshare``); no token, address or host name (``reportprivate``).
"""
from __future__ import annotations

import datetime
from pathlib import Path

from hetlab.store import measured
from hetlab.errors import HetlabError
from hetlab.views import reportclaims, reportshare, reportwords, reportwork
from hetlab.views.reportprivate import clean, redact, hosts as _hosts

ROLES = ("desktop", "mac")
NOTEBOOKS = ("01", "02", "05", "06", "07", "08", "09")
SIMULATED = measured.ORIGINS[measured.PRACTICE]
TITLE = "What my Mac and my desktop did"
SECTIONS = ("The machines", "The link", "How each speed was read", "Each machine alone",
            "Each technique on the pair", "The split against the speed ratio", "The search",
            "What the course predicted, and what happened", "The exercises", "In my own words")
FACTS = (("chip", "chip"), ("accelerator", "GPU / accelerator"), ("gpu_memory_gb", "GPU memory, GiB"),
         ("memory_gb", "memory, GiB"), ("cpus", "CPU cores"), ("os", "OS"), ("wsl", "WSL (Windows build)"),
         ("driver", "NVIDIA driver"), ("cuda", "CUDA build of torch"), ("mps", "MPS"), ("torch", "torch"),
         ("ray", "Ray"), ("python", "Python"), ("hetlab", "hetlab"), ("hetlab_commit", "hetlab commit"))


QUICK = "quick"
QUICK_MARK = "QUICK MODE (HETLAB_QUICK=1: fewer samples and steps), not a full run"


HOW_TO_HAND_IN = ("**Before you send it.** Write your answers in `report.md` (this page), between each "
                  "`<!-- your words -->` line and its end line. Then run `hetlab report` again: it keeps your words, "
                  "puts them into `report.html`, the one file to send, and `hetlab report --check` lists "
                  "what is still missing.")


def origin_label(data: dict) -> str:
    kind = measured.origin_of(data)
    return "" if kind == measured.PAIR else measured.ORIGINS[kind]


def run_label(run: dict) -> str:
    """"measured on HOST, DATE", and where it came from when not your pair (simulated, rehearsal)."""
    label = f"measured on {run.get('host', '?')}, {str(run.get('date', ''))[:10]}"
    if run.get("mode") == QUICK:
        label += f"; {QUICK_MARK}"
    extra = origin_label(run)
    return clean(f"{label}; {extra}" if extra else label)


def speed_text(s: dict | None) -> str:
    """A saved ``SteadySpeed``: median, range, windows, warm-up."""
    if not s:
        return "not measured"
    warm = (f"warm-up {s['warmup_steps']} steps, {s['warmup_s']:.2f} s, left out" if s["warmup_steps"]
            else "warm-up: none inside the windows")
    return (f"{s['samples_per_s']:,.0f} samples/s (range {s['low']:,.0f}–{s['high']:,.0f} over "
            f"{len(s['windows'])} windows; {warm})")


class Page:
    """The page being written: its lines, its CSV rows, its folder."""

    def __init__(self, out: Path, source: Path):
        self.out, self.source, self.lines, self.rows = out, source, [], []

    def add(self, *lines: str) -> None:
        self.lines += list(lines)

    def row(self, section: str, figure: str, value, source: str, unit: str = "", low="", high="", repeats="") -> None:
        self.rows.append({"section": section, "figure": figure, "value": value, "low": low, "high": high,
                          "unit": unit, "repeats": repeats, "source": source})

    def speed_row(self, section: str, figure: str, s: dict | None, source: str) -> None:
        if s:
            self.row(section, figure, round(s["samples_per_s"], 1), source, "samples/s", round(s["low"], 1),
                     round(s["high"], 1), f"{len(s['windows'])} windows")

    def figure(self, name: str, title: str, label: str, draw, words: str = "") -> None:
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.6))
        draw(ax)
        fig.tight_layout()
        fig.savefig(self.out / f"{name}.png", dpi=100)
        plt.close(fig)
        self.add(f"![{title} ({label})]({name}.png)", "", f"*{title}: {label}.*" + (f" {words}" if words else ""), "")


def _heading(page: Page, n: int, notebooks: str = "") -> None:
    page.add(f"## {n} · {SECTIONS[n - 1]}" + (f" (notebook{'s' if ',' in notebooks or '–' in notebooks else ''} {notebooks})"
                                             if notebooks else ""), "")


def _machines(page: Page) -> None:
    _heading(page, 1, "09")
    data = measured.load_figure("machines", page.source)
    if not data:
        page.add("Not yet described: run notebook 09's report cell with both machines connected "
                 "(`machines.collect()` reads each machine on itself).", "")
        return
    table = data["machines"]
    roles = list(dict.fromkeys([r for r in ROLES if r in table] + sorted(table)))
    page.add("| | " + " | ".join(roles) + " |", "|---|" + "---|" * len(roles))
    for key, name in FACTS:
        page.add(f"| {name} | " + " | ".join(str(table[r].get(key) if table[r].get(key) is not None else "—")
                                         for r in roles) + " |")
    page.add("| where | " + " | ".join(measured.ORIGINS[table[r].get("origin", "pair")] for r in roles) + " |", "")
    page.add(f"*Each column read by a task on that machine over the cluster, {str(data.get('date', ''))[:10]}.*", "")


def _link(page: Page) -> None:
    _heading(page, 2, "08")
    data = measured.load_figure("link", page.source)
    if not data:
        page.add("Not yet measured: run notebook 08's link exercise (`link.measure()`).", "")
        return
    label = run_label(data)
    page.add(f"- bandwidth, desktop → mac: {data['mbit_s']:,.0f} Mbit/s (range {data['mbit_s_low']:,.0f}–"
             f"{data['mbit_s_high']:,.0f} over {data['repeats']} objects of {data['sizes_mb'][-1]} MB; by size "
             + ", ".join(f"{mb} MB {v:,.0f}" for mb, v in zip(data["sizes_mb"], data["mbit_s_by_size"])) + ")",
             f"- round trip: {data['rtt_ms']:.2f} ms (range {data['rtt_ms_low']:.2f}–{data['rtt_ms_high']:.2f} over "
             f"{data['echoes']} echoes)",
             f"- how: a timed Ray object transfer and a small echo to an actor on the mac, Ray's overhead "
             f"included ({label})", "")
    page.row("link", "bandwidth", round(data["mbit_s"], 1), label, "Mbit/s", round(data["mbit_s_low"], 1),
             round(data["mbit_s_high"], 1), f"{data['repeats']} repeats")
    page.row("link", "round trip", round(data["rtt_ms"], 3), label, "ms", round(data["rtt_ms_low"], 3),
             round(data["rtt_ms_high"], 3), f"{data['echoes']} echoes")


def _method(page: Page, runs: dict) -> None:
    from hetlab.arithmetic.steady import WARMUP_STEPS, WINDOWS
    _heading(page, 3)
    page.add(f"Every speed here is read one way (`hetlab.arithmetic.steady`): the first {WARMUP_STEPS} steps of a "
             "run are its warm-up (a new shape's compile or search), timed apart and left out; the remaining steps "
             f"are cut into windows (usually {WINDOWS}), each gives one samples/s, and the speed is their median "
             "with the slowest and fastest window beside it. So one run gives its own spread.", "")
    repeated = ["the link (repeated transfers and echoes)"] if measured.load_figure("link", page.source) else []
    if "06" in runs:
        repeated.append("06's equal and tuned splits (two runs or more each, in turn)")
    page.add("Figures with repeats beyond the windows: " + ("; ".join(repeated) if repeated else "none yet") + ". "
             "The rest are one run each, with the spread of its windows.", "")


def _alone(page: Page, runs: dict) -> None:
    _heading(page, 4, "01, 02")
    rows = []
    for role in ROLES:
        data = measured.load(role, page.source)
        if data is None:
            rows.append(f"| {role} | not measured: run notebook 02 there | — | — | — |")
            continue
        s = (data.get("speeds") or {}).get("small")
        label = run_label(data)
        line = measured.step_time(role, "small", page.source)
        rows.append(f"| {role} | {speed_text(s)} | {line.formula} "
                    f"| {clean(data.get('accelerator') or data.get('device'))} | {label} |")
        page.speed_row("each machine alone", f"{role}, small CNN, batch {measured.ASSUMED_BATCH}", s, label)
    page.add(f"| machine | samples/s at batch {measured.ASSUMED_BATCH}, small CNN | step line t₀ + b × per sample | device | source |",
             "|---|---|---|---|---|", *rows, "")
    first = runs.get("01")
    if first:
        f = first["figures"]
        page.add(f"Notebook 01's model on the desktop: test accuracy {f['accuracy']:.2%} after {f['epochs']:.0f} "
                 f"epoch(s) at batch {f['batch']:.0f} ({run_label(first)}).", "")
        page.row("each machine alone", "01's test accuracy", round(f["accuracy"], 4), run_label(first))
    else:
        page.add("Notebook 01's accuracy: not yet saved: run notebook 01.", "")
    labels = []

    def draw(ax):
        for role in ROLES:
            line = measured.step_time(role, "small", page.source)
            data = measured.load(role, page.source)
            sizes = data["batch_sizes"] if data else list(measured.SWEEP_BATCHES)
            color = None
            if data and "small" in data["samples_per_s"]:
                dots = ax.plot(sizes, [1e3 * b / s for b, s in zip(sizes, data["samples_per_s"]["small"])], "o",
                               label=f"{role}, measured")
                color = dots[0].get_color()
            fitted = line.source.startswith("measured")
            ax.plot(sizes, [1e3 * line(b) for b in sizes], "-" if fitted else "--", color=color,
                    label=f"{role}, {'fitted' if fitted else 'estimated'}")
        ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms per step (small CNN)",
               title="Step time: t(b) = t₀ + b/T")
        ax.legend(fontsize=8)

    for role in ROLES:
        data = measured.load(role, page.source)
        labels.append(f"{role}: {run_label(data) if data else measured.step_time(role, 'small', page.source).source}")
    page.figure("steps", "Step time over the sweep", clean("; ".join(labels)), draw,
                "Dots: notebook 02's sweep; lines: the step line fitted to it. Where the line is flat the "
                "device is launch-bound: a bigger batch costs almost nothing more.")
    page.add(*reportwords.block("surprised-01-02", page.kept))


TECHNIQUES = (("05", "sync", "parameter server, per-step sync"), ("05", "async", "parameter server, async"),
              ("08", "sync", "per-step sync (08)"), ("08", "local SGD", "local SGD (08)"),
              ("07", "ray train", "Ray Train, gloo all-reduce"))


def _techniques(page: Page, runs: dict) -> None:
    _heading(page, 5, "05, 07, 08")
    page.add("| technique | samples/s | spread (windows) | efficiency vs the sum alone | communication share "
             "| conditions | time to target | final accuracy | source |", "|---|---|---|---|---|---|---|---|---|")
    shown = []
    for nb, key, name in TECHNIQUES:
        run = runs.get(nb)
        t = (run or {}).get("speeds", {}).get(key)
        if not t:
            page.add(f"| {name} | not yet measured: run notebook {nb} | — | — | — | — | — | — | — |")
            continue
        s, label = t["speed"], run_label(run)
        pct = lambda v: "—" if v is None else f"{v:.0%}"  # noqa: E731
        acc = "—" if t.get("accuracy") is None else f"{t['accuracy']:.2%} (target {t['target']:.0%})"
        page.add(f"| {name} | {s['samples_per_s']:,.0f} | {s['low']:,.0f}–{s['high']:,.0f}, {len(s['windows'])} windows, "
                 f"warm-up {s['warmup_steps']} steps left out | {pct(t.get('efficiency'))} | {pct(t.get('comm_share'))} "
                 f"| {reportclaims.run_conditions(t, run)} | {reportclaims.time_to_target(t)} | {acc} | {label} |")
        page.speed_row("techniques", name, s, label)
        for field in ("efficiency", "comm_share", "accuracy", "time_to_target_s"):
            if t.get(field) is not None:
                page.row("techniques", f"{name}: {field}", round(t[field], 4), label)
        shown.append((name, t, label))
    page.add("", "Efficiency: the technique's samples/s ÷ the sum of its workers' own device speeds in the same run "
             "(what the pair would do with nothing lost). Communication share: the workers' time spent on "
             "messages ÷ all their time (compute, messages, waiting). Conditions: the global batch, the split "
             "(desktop:mac), the steps and samples, the mode (quick: a short run, not comparable with a full one). "
             "Time to target: the training seconds to the first evaluation at or above the target.", "")
    if shown:
        def draw(ax):
            names = [n for n, _, _ in shown]
            medians = [t["speed"]["samples_per_s"] for _, t, _ in shown]
            errs = [[m - t["speed"]["low"] for m, (_, t, _) in zip(medians, shown)],
                    [t["speed"]["high"] - m for m, (_, t, _) in zip(medians, shown)]]
            ax.barh(names, medians, xerr=errs, color="#2a7ab0", capsize=3, label="measured (median, range)")
            ax.scatter([t["sum_alone"] for _, t, _ in shown], names, marker="|", s=300, color="k",
                       label="ideal: the sum alone")
            ax.set(xlabel="samples/s", title="Each technique against its ideal")
            ax.tick_params(axis="y", labelsize=7)
            ax.legend(fontsize=7)

        page.figure("techniques", "Samples per second of each technique, its ideal beside it",
                    clean("; ".join(sorted({label for _, _, label in shown}))), draw,
                    "A bar far short of its mark is time lost to messages and waiting; the communication share says "
                    "which.")
    for name, t, _ in shown:
        eff = "—" if t.get("efficiency") is None else f"{t['efficiency']:.0%}"
        page.add(*reportwords.ask(reportwords.key("why", name), f"{name}: why {eff} of the sum alone? Name the "
                                  "figure in your table that says where the rest went.", page.kept))
    page.add(*reportwords.block("surprised-05-07-08", page.kept))


def _split(page: Page, runs: dict) -> None:
    _heading(page, 6, "06")
    run = runs.get("06")
    if not run:
        page.add("Not yet measured: run notebook 06.", "")
    else:
        f, label = run["figures"], run_label(run)
        split = ":".join(str(int(b)) for b in f["tuned_split"])
        share = f["tuned_split"][1] / sum(f["tuned_split"])
        line = (f"The tuned split (desktop:mac) {split} gives the mac {share:.1%} of the batch"
                + (f"; the speeds alone ({f['speed_ratio']:.2f} : 1) give it {f['ratio_share']:.1%}"
                   if "speed_ratio" in f else "") + f". It ran at {f['efficiency_tuned']:.0%} of the sum of the "
                f"workers alone; the equal split at {f['efficiency_equal']:.0%} ({label}).")
        page.add(line, "")
        page.row("split", "mac's share of the tuned batch", round(share, 4), label)
        for name in ("efficiency_tuned", "efficiency_equal", "speed_ratio"):
            if name in f:
                page.row("split", name, round(f[name], 4), label)

        def draw(ax):
            ax.bar(["equal", f"tuned {split}"], [100 * f["efficiency_equal"], 100 * f["efficiency_tuned"]],
                   color=["#999999", "#2a7ab0"])
            ax.axhline(100, color="k", lw=0.8, ls="--", label="ideal: the sum alone")
            ax.set(ylabel="efficiency, % of the sum alone", ylim=(0, 110), title="Equal against tuned split")
            ax.legend(fontsize=8)

        page.figure("split", "Efficiency of the equal and the tuned split", label, draw,
                    "The tuned split gives each machine a share in proportion to its speed with its messages; "
                    "the gap to 100 % is what the exchange and the waiting cost.")
    page.add(*reportwords.block("surprised-06", page.kept))


def _search(page: Page, runs: dict) -> None:
    _heading(page, 7, "09")
    run = runs.get("09")
    if not run:
        page.add("Not yet measured: run notebook 09.", "")
    else:
        f, label = run["figures"], run_label(run)
        page.add(f"Pair ÷ sum: {f['pair_vs_sum']:.2f}; pair ÷ desktop alone: {f['pair_vs_desktop']:.2f} ({label}).", "")
        if "best_accuracy" in f:
            config = f.get("best_config") or {}
            page.add(f"Best configuration: {', '.join(f'{k} {v:g}' if isinstance(v, float) else f'{k} {v}' for k, v in config.items())}; "
                     f"held-out accuracy {f['best_accuracy']:.2%} ({label}).", "")
            page.row("search", "best accuracy", round(f["best_accuracy"], 4), label)
        for role in ROLES:
            s = run.get("speeds", {}).get(f"{role} trials")
            if s:
                page.add(f"- a trial on the {role}: {speed_text(s)}; each window one trial (its samples ÷ its busy seconds)")
                page.speed_row("search", f"a trial on the {role}", s, label)
        page.add("")
        page.row("search", "pair ÷ sum", round(f["pair_vs_sum"], 4), label)

        def draw(ax):
            values = [f["desktop_samples_per_s"], f["mac_samples_per_s"],
                      f["desktop_samples_per_s"] + f["mac_samples_per_s"], f["pair_samples_per_s"]]
            ax.bar(["desktop alone", "mac alone", "sum (ideal)", "pair"], values,
                   color=["#2a7ab0", "#e08a2c", "#bbbbbb", "#3a9a5b"])
            ax.set(ylabel="samples/s, the same configurations", title="The same search, three ways")

        page.figure("search", "Samples per second of the same search", label, draw,
                    "Trials exchange nothing, so the pair can come near the sum; the end of the search, when one "
                    "machine has no trial left, costs the rest.")
    page.add(*reportwords.block("surprised-09", page.kept))


def _predictions(page: Page, runs: dict) -> None:
    _heading(page, 8)
    if not any(run["predictions"] for run in runs.values()):
        page.add("No prediction saved yet: notebooks 02, 06, 08 and 09 save theirs.", "")
        return
    done = reportclaims.section(page, runs, run_label)
    if done:
        def draw(ax):
            ax.barh([f"{nb}: {name}"[:28] for nb, name, _, _ in done], [r for _, _, r, _ in done], color="#2a7ab0")
            ax.axvline(1, color="k", lw=0.8)
            ax.set(xlabel="measured ÷ predicted (1: as predicted)", title="Predictions against measurements")
            ax.tick_params(axis="y", labelsize=7)

        page.figure("predictions", "Measured ÷ predicted, each prediction",
                    "; ".join(sorted({f"notebook {nb}: {run_label(run)}" for nb, _, _, run in done})), draw,
                    "Near 1 the model of step time, link and engine held; far from it, one of them was off: the "
                    "sections above say which.")
    reportclaims.questions(page, done)


def source_folder(where: str | Path | None = None) -> Path:
    """The figures folder a report reads: ``where``, else ``measured.folder()``."""
    return Path(where) if where is not None else measured.folder()


def write(out: str | Path | None = None, where: str | Path | None = None, names: bool = False) -> Path:
    """Write ``report.md``, its PNGs, ``report.html`` and ``figures.csv`` into ``out`` (default:
    ``measured/report``) from the figures in ``where`` (default: ``measured/``), keeping the words the
    learner wrote in an earlier ``report.md`` there; host names become roles unless ``names``."""
    source = source_folder(where)
    target = Path(out) if out is not None else source / "report"
    runs = {nb: run for nb in NOTEBOOKS if (run := measured.load_run(nb, source)) is not None}
    if not runs and all(measured.load(role, source) is None for role in ROLES):
        raise HetlabError(f"nothing measured in {source} yet: run notebook 02 (and 05–09) first, "
                          f"or name the folder with --measured.")
    target.mkdir(parents=True, exist_ok=True)
    page = Page(target, source)
    page.kept = reportwords.read(target / "report.md")
    origins = sorted({measured.origin_of(r) for r in runs.values()})
    page.add(f"# {TITLE}", "",
             f"Written by `hetlab report` on {datetime.date.today().isoformat()} from the figures the course's "
             "notebooks saved. Every figure says where it comes from: measured (on which machine, when), "
             "estimated (the course's figure, not your machines), simulated (the practice cluster) or the "
             "rehearsal. The sections in *your words* are yours to write: `hetlab report` keeps them when it "
             "writes the page again.", "", HOW_TO_HAND_IN, "",
             "Where these runs come from: " + ("; ".join(measured.ORIGINS[o] for o in origins) or "no run yet") + ".", "")
    _machines(page)
    _link(page)
    _method(page, runs)
    _alone(page, runs)
    _techniques(page, runs)
    _split(page, runs)
    _search(page, runs)
    _predictions(page, runs)
    _heading(page, 9, "02–09")
    reportwork.exercises(page)
    _heading(page, 10)
    page.add(*reportwords.block("limitations", page.kept), *reportwords.block("would-change", page.kept))
    hosts = {} if names else _hosts(source)
    text = redact("\n".join(page.lines), hosts) if not names else clean("\n".join(page.lines))
    md = target / "report.md"
    md.write_text(text, encoding="utf-8")
    (target / "report.html").write_text(reportshare.to_html(text, target, TITLE), encoding="utf-8")
    rows = [{k: (redact(v, hosts) if isinstance(v, str) else v) for k, v in r.items()} for r in page.rows]
    reportshare.write_csv(rows, target / "figures.csv")
    return md
