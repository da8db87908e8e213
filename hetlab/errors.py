"""One exception type for every mistake a learner can make: one line that says what went wrong and
what to do, shown in a notebook instead of a deep traceback.
"""
import re


class HetlabError(Exception):
    """A bad input or an unreachable resource, explained in one actionable line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line

    def _render_traceback_(self):  # IPython: show only the line, not the stack
        return [f"HetlabError: {self}"]


def one_line(exc: BaseException) -> str:
    """The HetlabError line inside a Ray error, else the last exception line of its traceback (a worker's
    ``TypeError``), else its first 300 characters."""
    text = str(exc)
    if "HetlabError: " in text:
        return text.rsplit("HetlabError: ", 1)[1].splitlines()[0].strip()
    raised = [line.strip() for line in text.splitlines() if RAISED_LINE.match(line.strip())]
    return (raised[-1] if raised else " ".join(text.split()))[:300]


RAISED_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): ")
