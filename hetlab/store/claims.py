"""What a prediction or a measurement is about (issue 59): the quantity, the global batch, the split,
the roles and the mode (quick or full). ``hetlab report`` pairs a prediction only with a measurement
whose description is the same (``mismatch`` is None); otherwise its row reads "not yet measured".
Notebooks 02 and 09 describe theirs; a technique's run carries its own (``outcome.conditions``).
"""
from __future__ import annotations

import hetlab

QUICK, FULL = "quick", "full"
ROLES = ("desktop", "mac")
# The quantities the course predicts and measures (one model trained on both, or independent trials)
ONE_MODEL = "one model on the pair ÷ the desktop alone"
SEARCH = "independent trials on the pair ÷ the desktop alone"
COMPARED = ("quantity", "batch", "split", "roles", "mode")


def mode() -> str:
    """``"quick"`` under ``HETLAB_QUICK=1`` (fewer samples and steps), else ``"full"``."""
    return QUICK if hetlab.is_quick() else FULL


def about(quantity: str, batch=None, split=None, roles=ROLES, *, mode_: str | None = None,
          bound: bool = False, **more) -> dict:
    """A description: ``quantity`` (one of the names above, or a notebook's own), the global
    ``batch`` (a number, or the list of batches a run mixed), the ``split`` (None: any), the
    ``roles``, the ``mode`` (default: this process's); ``bound``: a limit no plan beats."""
    found = {"quantity": str(quantity), "batch": batch, "split": None if split is None else [int(b) for b in split],
             "roles": list(roles), "mode": mode_ or mode(), "bound": bool(bound)}
    return {**found, **more}


def mismatch(prediction: dict, measurement: dict) -> str | None:
    """Why ``measurement`` does not measure ``prediction`` ("batch 64, not 128"), or None when it does.
    A prediction with no split takes any split of the same global batch."""
    for key in COMPARED:
        want, got = prediction.get(key), measurement.get(key)
        if key == "split" and want is None:
            continue
        if want != got:
            return f"{key} {_show(key, got)}, not {_show(key, want)}"
    return None


def _show(key: str, value) -> str:
    """A split as desktop:mac, a mix of batches as its range, roles as a list."""
    if isinstance(value, list) and value:
        if key == "split":
            return ":".join(str(v) for v in value)
        return f"{min(value)}–{max(value)}" if key == "batch" else ", ".join(map(str, value))
    return str(value)

