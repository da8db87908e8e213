"""What the ``hetlab`` subcommand modules share (hetlab.tools.cli.app): a subparser whose ``--help``
shows its description and examples as written. Apart from ``cli`` so that ``cli`` imports the
subcommand modules (``cli_train``, ``cli_rehearse``, ``cli_gpu_check``) and none imports it back.
"""
from __future__ import annotations

import argparse


def _subcommand(sub, name: str, help: str, description: str, examples: str):
    """A subcommand whose --help shows its description and examples as written."""
    return sub.add_parser(name, help=help, description=description, epilog="examples:\n" + examples,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
