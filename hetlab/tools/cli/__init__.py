"""The ``hetlab`` console script: ``app`` parses and dispatches (``main``, re-exported here); one
module per larger subcommand (``train``, ``search``, ``report``, ``gpu_check``,
``update``), sharing ``base``.
"""
from hetlab.tools.cli.app import (  # noqa: F401 - re-exported
    SUBCOMMANDS, build_parser, main)
