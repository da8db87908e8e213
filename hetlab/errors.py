"""One exception type for every mistake a learner can make (used by every notebook).

A ``HetlabError`` carries a single line that says what went wrong and what to do,
so a notebook shows one readable line instead of a deep traceback.
"""
import sys


class HetlabError(Exception):
    """A bad input or an unreachable resource, explained in one actionable line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line

    def _render_traceback_(self):  # IPython: show only the line, not the stack
        return [f"HetlabError: {self}"]


def one_line_errors() -> None:
    """In a plain script, print an uncaught HetlabError as its one line, not a traceback.

    Opt-in (importing hetlab changes no global hook): call it at the top of your script.
    The ``hetlab`` CLI and notebooks need nothing (they show the one line already).
    """
    if getattr(sys.excepthook, "_hetlab", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, HetlabError):
            print(f"HetlabError: {exc}", file=sys.stderr)
        else:
            previous(exc_type, exc, tb)

    hook._hetlab = True
    sys.excepthook = hook
