"""The learner's hand-in (``hetlab report``, notebook 09's last cell), from what the notebooks saved.

One page, ``report.md``, and the same page as ``report.html`` (the one file to send). Each figure says
where it came from. Addresses, tokens and host names stay out: a host name becomes its role ("desktop",
"mac"; "this machine" where one box held both). The learner's words sit between
``<!-- your words: ID -->`` and ``<!-- end of your words -->`` and are kept when the page is written again.
"""
from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import jinja2
import mistune

from hetlab.course import guesses
from hetlab.course.exercises import EXERCISES
from hetlab.errors import HetlabError
from hetlab.arithmetic import estimates
from hetlab.store import measured

ROLES = ("desktop", "mac")
NOTEBOOKS = ("01", "02", "05", "06", "07", "08", "09")
TITLE = "What my Mac and my desktop did"
SECTIONS = ("The machines", "The link", "Each machine alone",
            "Each technique on the pair", "The split against the speed ratio", "The search",
            "What the course predicted, and what happened", "The exercises", "In my own words")
FACTS = (("accelerator", "GPU / accelerator"), ("gpu_memory_gb", "GPU memory, GiB"),
         ("memory_gb", "memory, GiB"), ("cpus", "CPU cores"), ("os", "OS"),
         ("driver", "NVIDIA driver"), ("cuda", "CUDA build of torch"), ("torch", "torch"),
         ("ray", "Ray"), ("python", "Python"), ("hetlab", "hetlab"), ("hetlab_commit", "hetlab commit"))
QUICK_MARK = "QUICK MODE (HETLAB_QUICK=1: fewer samples and steps), not a full run"
HOW_TO_HAND_IN = ("**Before you send it.** Write your answers in `report.md` (this page), between each "
                  "`<!-- your words -->` line and its end line. Then run `hetlab report` again: it keeps your words, "
                  "puts them into `report.html`, the one file to send, and `hetlab report --check` lists "
                  "what is still missing.")
TECHNIQUES = (("05", "sync", "parameter server, per-step sync"), ("05", "async", "parameter server, async"),
              ("08", "sync", "per-step sync (08)"), ("08", "local SGD", "local SGD (08)"),
              ("07", "ray train", "Ray Train, all-reduce through the rendezvous store"))
RIGHT = "right"

# --- what stays out: addresses, tokens, host names --------------------------------------------------

_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\b[0-9a-fA-F]{32,}\b")
_HOST_NAME = re.compile(r"\b[\w-]+\.(?:local|lan|home|localdomain)\b")
ONE_BOX = "this machine"


def clean(text: str) -> str:
    """``text`` with anything that looks like an IP address (private ones too) or a token left out."""
    return _ADDRESS.sub("(left out)", str(text))


def hosts(source: Path) -> dict[str, str]:
    """Every host name a saved file holds → the role it stands for (a run's host is the desktop's);
    a host that holds both roles (the practice cluster, one box) → "this machine"."""
    names = {}

    def name(host, role):
        if host:
            names[host] = role if names.get(host, role) == role else ONE_BOX

    for role in ROLES:
        name((measured.load(role, source) or {}).get("host"), role)
    for role, facts in ((measured.load_figure("machines", source) or {}).get("machines") or {}).items():
        name(facts.get("hostname"), role)
    for p in sorted(source.glob("*.json")):
        try:
            host = json.loads(p.read_text(encoding="utf-8")).get("host")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(host, str) and host:
            names.setdefault(host, "desktop")
    return names


def redact(text: str, hosts: dict[str, str]) -> str:
    """Host names as their roles, then addresses, tokens and any other ``.local`` name left out."""
    for host in sorted(hosts, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", hosts[host], text)
    return _HOST_NAME.sub("(a host name, left out)", clean(text))

# --- the learner's words, kept across rewrites --------------------------------------------------------

UNWRITTEN = "*(unwritten: replace this line with your own words)*"
UNANSWERED = "*(unanswered: replace this line with your answer, from the figures above)*"
_BLOCK = re.compile(r"<!-- your words: ([\w-]+) -->\n(.*?)\n<!-- end of your words -->", re.S)
# (id, the question): one per notebook's figures, then the two at the end
QUESTIONS = {
    "surprised-01-02": "Each machine alone (notebooks 01, 02): what surprised you?",
    "surprised-05-07-08": "The techniques on the pair (notebooks 05, 07, 08): what surprised you?",
    "surprised-06": "The split (notebook 06): what surprised you?",
    "surprised-09": "The search (notebook 09): what surprised you?",
    "limitations": "Limitations: what these figures cannot tell, and why",
    "would-change": "What you would change, with these two machines or with others",
}


def read_words(page: Path) -> dict[str, str]:
    """id → the learner's text, from an earlier ``report.md`` (unwritten blocks left out)."""
    if not page.is_file():
        return {}
    found = _BLOCK.findall(page.read_text(encoding="utf-8"))
    return {k: text.strip() for k, text in found if text.strip() and text.strip() not in (UNWRITTEN, UNANSWERED)}


def key(*parts: str) -> str:
    """A block's id from words that stay the same across rewrites ("why", "05", "async")."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", str(p).lower()).strip("-") for p in parts)


def unwritten(text: str) -> list[str]:
    """The ids of the blocks of a page still unwritten or unanswered."""
    return [k for k, body in _BLOCK.findall(text) if body.strip() in (UNWRITTEN, UNANSWERED)]

# --- the page ----------------------------------------------------------------------------------------


def run_label(run: dict) -> str:
    """"measured on HOST, DATE", and where it came from when not your pair (simulated, a host's label)."""
    label = f"measured on {run.get('host', '?')}, {str(run.get('date', ''))[:10]}"
    if run.get("mode") == measured.QUICK:
        label += f"; {QUICK_MARK}"
    kind = measured.origin_of(run)
    return clean(label if kind == measured.PAIR else f"{label}; {measured.describe(kind)}")


def speed_text(s: dict | None) -> str:
    """A saved ``SteadySpeed``: median, range, windows, warm-up."""
    if not s:
        return "not measured"
    warm = (f"warm-up {s['warmup_steps']} steps, {s['warmup_s']:.2f} s, left out" if s["warmup_steps"]
            else "warm-up: none inside the windows")
    return (f"{s['samples_per_s']:,.0f} samples/s (range {s['low']:,.0f}–{s['high']:,.0f} over "
            f"{len(s['windows'])} windows; {warm})")


class Page:
    """The page being written: its lines, the folder it reads, the words kept from the last one."""

    def __init__(self, out: Path, source: Path):
        self.source, self.lines, self.kept = source, [], read_words(out / "report.md")

    def add(self, *lines: str) -> None:
        self.lines += list(lines)

    def heading(self, n: int, notebooks: str = "") -> None:
        plural = "s" if "," in notebooks or "–" in notebooks else ""
        self.add(f"## {n} · {SECTIONS[n - 1]}" + (f" (notebook{plural} {notebooks})" if notebooks else ""), "")

    def words(self, block: str, question: str | None = None) -> None:
        """One of the learner's blocks: a fixed question (``QUESTIONS``), or ``question`` about their
        own figures; then their text, or the placeholder."""
        empty = UNWRITTEN if question is None else UNANSWERED
        self.add(f"**{question or QUESTIONS[block]}**", "", f"<!-- your words: {block} -->",
                 self.kept.get(block, empty), "<!-- end of your words -->", "")


def _machines(page: Page) -> None:
    page.heading(1, "09")
    data = measured.load_figure("machines", page.source)
    if not data:
        page.add("Not yet described: run notebook 09's report cell with both machines connected "
                 "(`figures.describe_machines()` reads each machine on itself).", "")
        return
    table = data["machines"]
    roles = list(dict.fromkeys([r for r in ROLES if r in table] + sorted(table)))
    page.add("| | " + " | ".join(roles) + " |", "|---|" + "---|" * len(roles))
    for k, name in FACTS:
        page.add(f"| {name} | " + " | ".join(str(table[r].get(k) if table[r].get(k) is not None else "—")
                                         for r in roles) + " |")
    page.add("| where | " + " | ".join(measured.describe(table[r].get("origin", "pair")) for r in roles) + " |", "")
    page.add(f"*Each column read by a task on that machine over the cluster, {str(data.get('date', ''))[:10]}.*", "")


def _link(page: Page) -> None:
    page.heading(2, "08")
    data = measured.load_figure("link", page.source)
    if not data:
        page.add("Not yet measured: run notebook 08's link exercise (`figures.measure_link()`).", "")
        return
    label = run_label(data)
    page.add(f"- bandwidth, desktop → mac: {data['mbit_s']:,.0f} Mbit/s (range {data['mbit_s_low']:,.0f}–"
             f"{data['mbit_s_high']:,.0f} over {data['repeats']} objects of {data['sizes_mb'][-1]} MB; by size "
             + ", ".join(f"{mb} MB {v:,.0f}" for mb, v in zip(data["sizes_mb"], data["mbit_s_by_size"])) + ")",
             f"- round trip: {data['rtt_ms']:.2f} ms (range {data['rtt_ms_low']:.2f}–{data['rtt_ms_high']:.2f} over "
             f"{data['echoes']} echoes)",
             f"- how: a timed Ray object transfer and a small echo to an actor on the mac, Ray's overhead "
             f"included ({label})", "")


def _alone(page: Page, runs: dict) -> None:
    page.heading(3, "01, 02")
    rows = []
    for role in ROLES:
        data = measured.load(role, page.source)
        if data is None:
            rows.append(f"| {role} | not measured: run notebook 02 there | — | — | — |")
            continue
        s, label = (data.get("speeds") or {}).get("small"), run_label(data)
        rows.append(f"| {role} | {speed_text(s)} | {measured.step_time(role, 'small', page.source).formula} "
                    f"| {clean(data.get('accelerator') or data.get('device'))} | {label} |")
    page.add(f"| machine | samples/s at batch {estimates.COURSE_BATCH}, small CNN | step line t₀ + b × per sample "
             "| device | source |", "|---|---|---|---|---|", *rows, "")
    first = runs.get("01")
    if first:
        f = first["figures"]
        page.add(f"Notebook 01's model on the desktop: test accuracy {f['accuracy']:.2%} after {f['epochs']:.0f} "
                 f"epoch(s) at batch {f['batch']:.0f} ({run_label(first)}).", "")
    else:
        page.add("Notebook 01's accuracy: not yet saved: run notebook 01.", "")

    page.words("surprised-01-02")


def conditions(d: dict, mode: str | None) -> str:
    """What a figure ran under, in one cell: the global batch (or the range of batches a search
    mixed), the split desktop:mac with its roles, the steps and samples, the mode, the devices."""
    b, parts = d.get("batch"), []
    if b is not None:
        parts.append("batch " + (f"{min(b)}–{max(b)}" if isinstance(b, list) else str(b)))
    if d.get("split"):
        parts.append(f"split {':'.join(str(x) for x in d['split'])}" + (f" ({', '.join(d['roles'])})" if d.get("roles") else ""))
    if "steps" in d:
        parts.append(f"{d['steps']} {d.get('unit', 'steps')}, {d['samples']:,} samples")
    if mode:
        parts.append({"quick": "QUICK mode (a short run)", "full": "full mode"}.get(mode, f"{mode} mode"))
    return (", ".join(parts) or "—") + (f"; {', '.join(clean(x) for x in d['devices'])}" if d.get("devices") else "")


def time_to_target(t: dict) -> str:
    """The first evaluation at or above the target (with how often and on how many samples it checked)."""
    if not t.get("checks"):
        return "not checked during the run (accuracy read once, at its end)"
    how = f"checked every {t['check_every_steps']} {t.get('unit', 'steps')} on {t['check_samples']:,} test samples"
    if t.get("time_to_target_s") is None:
        return f"not reached in {t['checked_s']:.1f} s ({how})"
    return f"{t['time_to_target_s']:.1f} s of training ({how})"


def _techniques(page: Page, runs: dict) -> None:
    page.heading(4, "05, 07, 08")
    page.add("| technique | samples/s | spread (windows) | efficiency vs the sum alone | communication share "
             "| conditions | time to target | final accuracy | source |", "|---|---|---|---|---|---|---|---|---|")
    shown = []
    for nb, k, name in TECHNIQUES:
        run = runs.get(nb)
        t = (run or {}).get("speeds", {}).get(k)
        if not t:
            page.add(f"| {name} | not yet measured: run notebook {nb} | — | — | — | — | — | — | — |")
            continue
        s, label = t["speed"], run_label(run)
        pct = lambda v: "—" if v is None else f"{v:.0%}"  # noqa: E731
        acc = "—" if t.get("accuracy") is None else f"{t['accuracy']:.2%} (target {t['target']:.0%})"
        page.add(f"| {name} | {s['samples_per_s']:,.0f} | {s['low']:,.0f}–{s['high']:,.0f}, {len(s['windows'])} windows, "
                 f"warm-up {s['warmup_steps']} steps left out | {pct(t.get('efficiency'))} | {pct(t.get('comm_share'))} "
                 f"| {conditions(t, run.get('mode'))} | {time_to_target(t)} | {acc} | {label} |")
        shown.append((name, t))
    page.add("", "Efficiency: the technique's samples/s ÷ the sum of its workers' own device speeds in the same run "
             "(what the pair would do with nothing lost). Communication share: the workers' time spent on "
             "messages ÷ all their time (compute, messages, waiting). Conditions: the global batch, the split "
             "(desktop:mac), the steps and samples, the mode (quick: a short run, not comparable with a full one). "
             "Time to target: the training seconds to the first evaluation at or above the target.", "")
    for name, t in shown:
        eff = "—" if t.get("efficiency") is None else f"{t['efficiency']:.0%}"
        page.words(key("why", name), f"{name}: why {eff} of the sum alone? Name the figure in your table that "
                   "says where the rest went.")
    page.words("surprised-05-07-08")


def _split(page: Page, runs: dict) -> None:
    page.heading(5, "06")
    run = runs.get("06")
    if not run:
        page.add("Not yet measured: run notebook 06.", "")
    else:
        f, label = run["figures"], run_label(run)
        split = ":".join(str(int(b)) for b in f["tuned_split"])
        share = f["tuned_split"][1] / sum(f["tuned_split"])
        page.add(f"The tuned split (desktop:mac) {split} gives the mac {share:.1%} of the batch"
                 + (f"; the speeds alone ({f['speed_ratio']:.2f} : 1) give it {f['ratio_share']:.1%}"
                    if "speed_ratio" in f else "") + f". It ran at {f['efficiency_tuned']:.0%} of the sum of the "
                 f"workers alone; the equal split at {f['efficiency_equal']:.0%} ({label}).", "")
    page.words("surprised-06")


def _search(page: Page, runs: dict) -> None:
    page.heading(6, "09")
    run = runs.get("09")
    if not run:
        page.add("Not yet measured: run notebook 09.", "")
    else:
        f, label = run["figures"], run_label(run)
        page.add(f"Pair ÷ sum: {f['pair_vs_sum']:.2f}; pair ÷ desktop alone: {f['pair_vs_desktop']:.2f} ({label}).", "")
        if "best_accuracy" in f:
            config = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in (f.get("best_config") or {}).items())
            page.add(f"Best configuration: {config}; held-out accuracy {f['best_accuracy']:.2%} ({label}).", "")
        for role in ROLES:
            s = run.get("speeds", {}).get(f"{role} trials")
            if s:
                page.add(f"- a trial on the {role}: {speed_text(s)}; each window one trial (its samples ÷ its busy seconds)")
        page.add("")

    page.words("surprised-09")

# --- predictions, each beside what the same run measured ------------------------------------------


def _guesses(page: Page) -> None:
    """Your "Predict first" guesses beside what the notebook then measured (``hetlab.course.guesses``),
    under section 7's predictions."""
    kept = guesses.load(page.source)
    page.add("Your guesses, typed before each measurement:", "", "| notebook | question | your guess | measured |",
             "|---|---|---|---|")
    for name, (nb, question) in guesses.QUESTIONS.items():
        mine, got = kept.get(name, {}).get("guess"), kept.get(name, {}).get("measured")
        page.add(f"| {nb} | {question} | {'no guess typed' if mine is None else f'{mine:.3g}'} "
                 f"| {'—' if got is None else f'{got:.3g}'} |")
    page.add("")


def _predictions(page: Page, runs: dict) -> None:
    page.heading(7)
    if not any(run["predictions"] for run in runs.values()):
        page.add("No prediction saved yet: notebooks 02, 06, 08 and 09 save theirs.", "")
        return
    page.add("| notebook | what | predicted | measured | measured ÷ predicted | how it was predicted "
             "| whose figures | source |", "|---|---|---|---|---|---|---|---|")
    done = []
    for nb, run in sorted(runs.items()):
        for name, p in run["predictions"].items():
            value, label = p["measured"], run_label(run)
            head = f"| {nb} | {name} | {p['predicted']:.3g} |"
            tail = f"| {clean(p['how'])} | {p.get('whose') or '—'} | {label} |"
            if value is None:
                page.add(f"{head} not yet measured | — {tail}")
                continue
            ratio = value / p["predicted"] if p["predicted"] else float("nan")
            page.add(f"{head} {value:.3g} | {ratio:.2f} {tail}")
            done.append((nb, name, ratio))
    page.add("", "Each prediction sits beside what the same run measured.", "")
    for nb, name, ratio in done:
        page.words(key("why", nb, name), f"{nb}, {name}: measured ÷ predicted is {ratio:.2f}. Which figure "
                   "in your tables explains the gap (step line, link, engine, waiting)?")


def _exercises(page: Page) -> None:
    """One row per graded exercise of the course: its last result on each machine, or "not run"."""
    page.heading(8, "02–09")
    results = measured.load_graded(page.source)
    page.add("| notebook | exercise | machine | result | when |", "|---|---|---|---|---|")
    for name, ex in sorted(EXERCISES.items(), key=lambda item: (item[1].notebook, item[0])):
        mine = [r for r in results.values() if r["exercise"] == name]
        if not mine:
            page.add(f"| {ex.notebook} | `{name}` | — | not run: run its check cell in notebook {ex.notebook} | — |")
        for r in sorted(mine, key=lambda r: r["role"]):
            page.add(f"| {ex.notebook} | `{name}` | {r['role']} | {r['status']}: {clean(r['line'])} "
                     f"| {str(r.get('date', ''))[:10]} |")
    passed = {r["exercise"] for r in results.values() if r["status"] == RIGHT}
    page.add("", f"Passed: {len(passed)} of {len(EXERCISES)}. Each grader tries your function on random inputs "
             "against hetlab's own and names the typical mistake it made; the last result on each machine is kept.", "")
    for r in sorted((r for r in results.values() if r.get("source")), key=lambda r: (r["notebook"], r["exercise"])):
        page.add(f"What you wrote for `{r['exercise']}` (notebook {r['notebook']}, the {r['role']}, "
                 f"{r['status']}):", "", "```python", *r["source"].splitlines(), "```", "")

# --- what is sent: HTML -----------------------------------------------------------------------------


class _Html(mistune.HTMLRenderer):
    """The page's Markdown as HTML, the learner's words escaped (a tag they type is shown, never run);
    the learner's-words markers stay HTML comments."""

    def block_html(self, text: str) -> str:
        return text + "\n" if text.startswith("<!--") else super().block_html(text)


HTML = jinja2.Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title><style>
body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.45}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top}
code{background:#f3f3f3}
</style></head><body>
{{ body | safe }}
</body></html>
""", autoescape=True)


def to_html(markdown: str) -> str:
    """``markdown`` (the report's page) as one self-contained HTML document: a mail or a course site
    opens it with nothing else."""
    body = mistune.create_markdown(renderer=_Html(escape=True), plugins=["table"])(markdown)
    return HTML.render(title=TITLE, body=body)


def write(out: str | Path | None = None, where: str | Path | None = None) -> Path:
    """Write ``report.md`` and ``report.html`` into ``out`` (default:
    ``measured/report``) from the figures in ``where`` (default: ``measured.folder()``), keeping the
    words the learner wrote in an earlier ``report.md`` there; host names become their roles."""
    source = source_folder(where)
    target = Path(out) if out is not None else source / "report"
    runs = {nb: run for nb in NOTEBOOKS if (run := measured.load_run(nb, source)) is not None}
    if not runs and all(measured.load(role, source) is None for role in ROLES):
        raise HetlabError(f"nothing measured in {source} yet: run notebook 02 (and 05–09) first, "
                          f"or name the folder with --measured.")
    target.mkdir(parents=True, exist_ok=True)
    page = Page(target, source)
    origins = sorted({measured.origin_of(r) for r in runs.values()})
    page.add(f"# {TITLE}", "",
             f"Written by `hetlab report` on {datetime.date.today().isoformat()} from the figures the course's "
             "notebooks saved. Every figure says where it comes from: measured (on which machine, when), "
             "estimated (the course's figure), simulated (the practice cluster) or a host playing a machine.",
             "", HOW_TO_HAND_IN, "",
             "Where these runs come from: " + ("; ".join(measured.describe(o) for o in origins) or "no run yet") + ".", "")
    _machines(page)
    _link(page)
    _alone(page, runs)
    _techniques(page, runs)
    _split(page, runs)
    _search(page, runs)
    _predictions(page, runs)
    _guesses(page)
    _exercises(page)
    page.heading(9)
    page.words("limitations")
    page.words("would-change")
    text = redact("\n".join(page.lines), hosts(source))
    md = target / "report.md"
    md.write_text(text, encoding="utf-8")
    (target / "report.html").write_text(to_html(text), encoding="utf-8")
    return md


def source_folder(where: str | Path | None = None) -> Path:
    """The figures folder a report reads: ``where``, else ``measured.folder()``."""
    return Path(where) if where is not None else measured.folder()


def missing(page_text: str, source: str | Path) -> list[str]:
    """What the written page still lacks (``hetlab report --check``), one line each: sections not
    measured, unanswered questions, guesses not typed, exercises not passed."""
    lines = []
    for line in page_text.splitlines():
        found = re.search(r"[Nn]ot yet (?:measured|described|saved)[^|]*", line)
        if found and not line.startswith("| notebook |"):
            head = line.split("|")[1].strip() if line.startswith("|") else ""
            lines.append(f"not measured: {head + ': ' if head else ''}{found.group(0).strip().rstrip('.')}")
    lines += [f"unanswered: your words '{k}' in report.md" for k in unwritten(page_text)]
    passed = {r["exercise"] for r in measured.load_graded(source).values() if r["status"] == RIGHT}
    typed = guesses.load(source)
    lines += [f"no guess typed: {question} (notebook {nb}, under its Predict first question)"
              for name, (nb, question) in guesses.QUESTIONS.items() if typed.get(name, {}).get("guess") is None]
    lines += [f"exercise not passed: {name} (notebook {ex.notebook})"
              for name, ex in sorted(EXERCISES.items(), key=lambda item: (item[1].notebook, item[0]))
              if name not in passed]
    return lines
