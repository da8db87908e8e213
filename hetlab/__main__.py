"""``python -m hetlab …`` runs the ``hetlab`` console script (where hetlab is not pip-installed,
e.g. a checkout on a GPU machine with ``PYTHONPATH=.``; docs/gpu-machine.md)."""
import sys

from hetlab.tools.cli import main

sys.exit(main())
