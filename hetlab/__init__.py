"""hetlab: learn to train one model across unlike machines with Ray; the notebooks introduce each module."""
import contextlib
import os

from hetlab.errors import HetlabError
from hetlab.vocab import QUICK_ENV

__version__ = "0.1.0"


@contextlib.contextmanager
def environment(values: dict, keep_set: bool = False):
    """``values`` in this process's environment inside the block (processes started inside inherit them),
    as before after it. ``keep_set``: a variable you have set keeps your value."""
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
    """True when ``HETLAB_QUICK=1``: notebooks and CLI shrink their runs."""
    return os.environ.get(QUICK_ENV, "0") not in ("", "0", "false", "False")


PROGRESS_EVERY_S = 2.0   # a notebook's output channel drops the oldest of ~1,000 unread redraws


def progress_bar(total: int, desc: str, enabled: bool = True):
    """The progress bar of every training loop: tqdm, redrawn every 2 s at most, without the monitor
    thread tqdm starts and never stops."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar(total=total, desc=desc, disable=not enabled, mininterval=PROGRESS_EVERY_S, miniters=1)


__all__ = ["HetlabError", "is_quick", "progress_bar", "__version__"]
