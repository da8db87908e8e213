"""One exception type for every mistake a learner can make (used by every notebook).

A ``HetlabError`` carries a single line that says what went wrong and what to do,
so a notebook shows one readable line instead of a deep traceback.
"""


class HetlabError(Exception):
    """A bad input or an unreachable resource, explained in one actionable line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line

    def _render_traceback_(self):  # IPython: show only the line, not the stack
        return [f"HetlabError: {self}"]
