"""What the ``hetlab`` subcommand modules share: a subparser whose ``--help`` shows its description
and examples as written. Apart from ``app`` so that ``app`` imports the subcommand modules
(``train``, ``gpu_check``, ``search``, ``report``) and none imports it back.
"""
from __future__ import annotations

import argparse


def subcommand(sub, name: str, help: str, description: str, examples: str):
    """A subcommand whose --help shows its description and examples as written."""
    return sub.add_parser(name, help=help, description=description, epilog="examples:\n" + examples,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
