"""The report's predictions (``hetlab report``, section 8): each beside a measurement of the same thing.

A prediction and a measurement each say what they are about (``hetlab.store.claims``: quantity,
global batch, split, roles, mode). A prediction is paired only with one whose description matches;
else its row reads "not yet measured" and says what to run. 02's ceiling is a bound: a one-model
run on the pair at its batch (07's) holds or breaks it; a search never measures it. A technique's
row says its own conditions and its time to target (``run_conditions``, ``time_to_target``).
"""
from __future__ import annotations

from hetlab.store import claims, measured
from hetlab.views import reportwords
from hetlab.views.reportprivate import clean

# Which notebook measures each quantity the course predicts (what a "not yet measured" row says to run)
MEASURED_BY = {claims.ONE_MODEL: "notebook 07 (one model, Ray Train, on the pair at this batch)",
               claims.SEARCH: "a search whose trials all train at this batch (notebook 09 mixes 32–128)"}


def one_model_run(runs: dict, source) -> tuple | None:
    """(pair ÷ desktop alone, about, notebook) from 07's run: one model trained on both machines at
    its global batch, over the desktop's own speed at that batch (notebook 02's sweep, the same origin)."""
    run = runs.get("07")
    t = (run or {}).get("speeds", {}).get("ray train")
    desktop = measured.load("desktop", source)
    if not t or "batch" not in t or desktop is None or "small" not in desktop["samples_per_s"] \
            or measured.origin_of(desktop) != measured.origin_of(run):
        return None                                  # no run, or no desktop measured where 07 ran
    alone = measured.speed("desktop", "small", t["batch"], source)
    on = claims.about(claims.ONE_MODEL, t["batch"], t["split"], t["roles"], mode_=run.get("mode", claims.FULL))
    return t["speed"]["samples_per_s"] / float(alone), on, "07"


def measurements(runs: dict, source) -> list[tuple]:
    """Every saved measurement a prediction may read: (value, about, notebook)."""
    found = [(m["value"], m["about"], nb) for nb, run in sorted(runs.items())
             for m in run.get("measures", {}).values()]
    one = one_model_run(runs, source)
    return found + ([one] if one else [])


def pair(p: dict, nb: str, found: list[tuple]) -> tuple:
    """(measured value or None, from which notebook, why not) for prediction ``p`` saved by notebook ``nb``."""
    about = p.get("about")
    if p["measured"] is not None:                      # measured in the same run, on the same conditions
        return p["measured"], nb, ""
    if about is None:
        return None, "", "not yet measured"
    same = [(v, n) for v, on, n in found if claims.mismatch(about, on) is None]
    if same:
        return same[-1][0], same[-1][1], ""
    near = [claims.mismatch(about, on) for _, on, _ in found if on.get("quantity") == about["quantity"]]
    run_this = MEASURED_BY.get(about["quantity"], "the notebook that measures it")
    return None, "", f"not yet measured: run {run_this}" + (f" (the run saved has {near[-1]})" if near else "")


def section(page, runs: dict, run_label) -> list[tuple]:
    """Section 8's table, one row per prediction; returns (notebook, name, ratio, run) of the paired
    ones that are not bounds (the plot's bars)."""
    found = measurements(runs, page.source)
    page.add("| notebook | what | predicted | measured | measured ÷ predicted | conditions | how it was predicted "
             "| whose figures | source |", "|---|---|---|---|---|---|---|---|---|")
    done = []
    for nb, run in sorted(runs.items()):
        for name, p in run["predictions"].items():
            about, label = p.get("about") or {}, run_label(run)
            value, where, why = pair(p, nb, found)
            cond = conditions(about, run)
            head = f"| {nb} | {name} | {p['predicted']:.3g} |"
            tail = f"| {cond} | {clean(p['how'])} | {p.get('whose') or '—'} | {label} |"
            if value is None:
                page.add(f"{head} {why} | — {tail}")
            elif about.get("bound"):
                held = value <= p["predicted"] + 1e-9
                page.add(f"{head} {value:.3g} (notebook {where}) | bound {'held' if held else 'broken'}: "
                         f"{'no run beat it' if held else 'the run beat the ceiling: a step line was off'} {tail}")
                page.row("predictions", f"{nb}: {name}: bound {'held' if held else 'broken'}", round(value, 4), label)
            else:
                ratio = value / p["predicted"] if p["predicted"] else float("nan")
                page.add(f"{head} {value:.3g} | {ratio:.2f} {tail}")
                page.row("predictions", f"{nb}: {name}: measured ÷ predicted", round(ratio, 4), label)
                done.append((nb, name, ratio, run))
    page.add("", "A prediction is compared only with a measurement of the same quantity at the same global batch, "
             "split, roles and mode. A bound (the ceiling) is held or broken, never a ratio.", "")
    return done


def conditions(about: dict, run: dict) -> str:
    """A prediction's conditions in one cell: batch, split, mode."""
    parts = []
    if about.get("batch") is not None:
        b = about["batch"]
        parts.append("batch " + ("–".join(str(x) for x in (min(b), max(b))) if isinstance(b, list) else str(b)))
    if about.get("split"):
        parts.append("split " + ":".join(str(x) for x in about["split"]))
    mode = about.get("mode") or run.get("mode")
    if mode:
        parts.append(f"{mode} mode")
    return ", ".join(parts) or "—"


def questions(page, done: list[tuple]) -> None:
    """A question per paired prediction: why this ratio, answered from the tables above."""
    for nb, name, ratio, _ in done:
        key = reportwords.key("why", nb, name)
        page.add(*reportwords.ask(key, f"{nb}, {name}: measured ÷ predicted is {ratio:.2f}. Which figure "
                                       "in your tables explains the gap (step line, link, engine, waiting)?", page.kept))


def run_conditions(t: dict, run: dict) -> str:
    """A technique's conditions in one cell: global batch, split, steps, samples, mode."""
    if "batch" not in t:
        return "not recorded: run the notebook again"
    mode = {"quick": "QUICK mode (a short run)", "full": "full mode"}.get(run.get("mode"), "mode not recorded")
    devices = f"; {', '.join(clean(d) for d in t['devices'])}" if t.get("devices") else ""
    return (f"batch {t['batch']}, split {':'.join(str(b) for b in t['split'])} ({', '.join(t['roles'])}), "
            f"{t['steps']} {t.get('unit', 'steps')}, {t['samples']:,} samples, {mode}{devices}")


def time_to_target(t: dict) -> str:
    """The first evaluation at or above the target (with how often and on how many samples it checked)."""
    if not t.get("checks"):
        return "not checked during the run (accuracy read once, at its end)"
    how = f"checked every {t['check_every_steps']} {t.get('unit', 'steps')} on {t['check_samples']:,} test samples"
    if t.get("time_to_target_s") is None:
        return f"not reached in {t['checked_s']:.1f} s ({how})"
    return f"{t['time_to_target_s']:.1f} s of training ({how})"

