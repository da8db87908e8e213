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


def is_test_run() -> bool:
    """True when a test runner, not a person, runs this notebook: nbval under pytest (pytest sets
    ``PYTEST_CURRENT_TEST`` and the kernel nbval starts inherits it) or CI (``CI`` set).

    A notebook's last cell shuts its cluster down only then; in JupyterLab it leaves the widgets
    working after "Run All" and says how to shut down (notebook 06).
    """
    return any(os.environ.get(v, "0") not in ("", "0", "false", "False") for v in ("PYTEST_CURRENT_TEST", "CI"))


__all__ = ["HetlabError", "is_quick", "is_test_run", "__version__"]
