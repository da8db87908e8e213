"""hetlab: learn to train one model across unlike machines with Ray.

The notebooks in ``notebooks/`` introduce each module in order; the library does
the real work so that the notebooks never re-implement it.
"""
import os

from hetlab.errors import HetlabError

__version__ = "0.1.0"


def is_quick() -> bool:
    """True when ``HETLAB_QUICK=1``: notebooks and CLI shrink their runs (CI sets it)."""
    return os.environ.get("HETLAB_QUICK", "0") not in ("", "0", "false", "False")


__all__ = ["HetlabError", "is_quick", "__version__"]
