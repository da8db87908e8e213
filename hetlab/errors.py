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


def _one_line_excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    """Uncaught HetlabError in a plain script: print its one line, not a traceback (added by issue 3)."""
    if issubclass(exc_type, HetlabError):
        print(f"HetlabError: {exc}", file=sys.stderr)
    else:
        _previous(exc_type, exc, tb)


sys.excepthook = _one_line_excepthook
