"""Your "Predict first" guesses (notebooks 02–09): in the cell under each question you type your guess,
``guess("05-idle", 0.7)``; the cell that measures it then calls ``measured_as("05-idle", idle)``, which
keeps the figure beside your guess and prints both. The report shows each pair (its section 7), and
``hetlab report --check`` names every question still without a guess. One file, ``guesses.json``, in
your figures folder.
"""
from __future__ import annotations

import math

from hetlab.errors import HetlabError
from hetlab.store import measured

FILE = "guesses"

# name → (notebook, the question, as the report asks it)
QUESTIONS = {
    "02-best-batch": ("02", "the batch size at which the small CNN stops gaining much"),
    "02-fastest-over-slowest": ("02", "the fastest device's samples/s ÷ the slowest's"),
    "03-two-tasks-s": ("03", "seconds for two one-second tasks"),
    "03-done-after-3-s": ("03", "a task asking for a GPU too many has finished after 3 s (1 yes, 0 no)"),
    "05-desktop-idle": ("05", "the share of each step the desktop sits idle, equal split"),
    "05-async-updates": ("05", "the desktop's async updates per update of the Mac's"),
    "06-desktop-share": ("06", "the desktop's share of the batch in auto-tune's split"),
    "06-tuned-over-equal": ("06", "the tuned split's samples/s ÷ the equal split's"),
    "07-mac-share": ("07", "the mac rank's share of the global batch with batch_sizes=\"auto\""),
    "08-same-digest": ("08", "whether the resumed run prints step 10's digest (1 yes, 0 no)"),
    "08-mac-local-steps": ("08", "the mac's local steps per round at H = 8"),
    "09-end-minus-held-out": ("09", "the best trial trained to the end: its test accuracy − its held-out accuracy"),
}


def load(where=None) -> dict[str, dict]:
    """name → {"guess": your number or None, "measured": the notebook's or None}."""
    kept = measured.load_figure(FILE, where)
    return dict(kept["guesses"]) if kept else {}


def _keep(name: str, field: str, value) -> float | None:
    if name not in QUESTIONS:
        raise HetlabError(f"no question {name!r}: pick one of {sorted(QUESTIONS)}.")
    if value is None or value is Ellipsis:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise HetlabError(f"{name}: give a number, e.g. 0.5, not {value!r}.") from None
    if not math.isfinite(number):
        raise HetlabError(f"{name}: give a finite number, not {value!r}.")
    guesses = load()
    guesses[name] = {**guesses.get(name, {"guess": None, "measured": None}), field: number}
    measured.save_figure(FILE, {"guesses": guesses})
    return number


def guess(name: str, value) -> None:
    """Keep your guess for question ``name`` (a number), before the notebook measures it."""
    if _keep(name, "guess", value) is None:
        print(f"your guess: type a number in place of None for {QUESTIONS[name][1]}, then run this cell")
    else:
        print(f"kept your guess for {QUESTIONS[name][1]}: {float(value):.3g}")


def measured_as(name: str, value) -> None:
    """Keep what the notebook measured for question ``name`` beside your guess, and print both."""
    if _keep(name, "measured", value) is None:
        raise HetlabError(f"{name}: the notebook measured nothing to keep ({value!r}).")
    mine = load().get(name, {}).get("guess")
    said = "no guess typed above" if mine is None else f"you guessed {mine:.3g}"
    print(f"{QUESTIONS[name][1]}: measured {float(value):.3g}; {said}")
