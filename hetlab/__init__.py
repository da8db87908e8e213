"""hetlab: learn to train one model across unlike machines with Ray.

The notebooks in ``notebooks/`` introduce each module in order; the library does
the real work so that the notebooks never re-implement it.
"""
import contextlib
import os

from hetlab.errors import HetlabError
from hetlab.vocab import QUICK_ENV

__version__ = "0.1.0"


@contextlib.contextmanager
def environment(values: dict, keep_set: bool = False):
    """``values`` in this process's environment inside the block, and as before after it; the
    processes started inside inherit them (a practice node's raylet: ``hetlab.cluster.practice``; Ray Train
    passes some on to its controller: ``hetlab.raytrain.mixed``). ``keep_set``: a variable you have set
    keeps your value."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if not (keep_set and old[k] is not None)})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def is_quick() -> bool:
    """True when ``HETLAB_QUICK=1``: notebooks and CLI shrink their runs (CI sets it)."""
    return os.environ.get(QUICK_ENV, "0") not in ("", "0", "false", "False")


PROGRESS_EVERY_S = 2.0   # a notebook's output channel drops the oldest of ~1,000 unread redraws


def progress_bar(total: int, desc: str, enabled: bool = True):
    """The progress bar of every training loop (notebooks 01, 05): tqdm, redrawn every 2 s at most,
    without tqdm's monitor thread, which its bars start and never stop (``miniters=1`` checks the
    clock on every update instead)."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar(total=total, desc=desc, disable=not enabled, mininterval=PROGRESS_EVERY_S, miniters=1)


__all__ = ["HetlabError", "is_quick", "progress_bar", "__version__"]
