"""Ray's "Token authentication is enabled" warning, explained once instead of shown every time (notebooks 03–09).

Ray 2.59 and later turn token authentication on in every process that starts a local cluster while
RAY_AUTH_MODE is unset, and log it as a red stderr box in every notebook. ``explain_token_auth`` drops
exactly that record and prints hetlab's one-line notice in its place, once per process.
"""
from __future__ import annotations

import logging

TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_ENABLED = "Token authentication is enabled for this Ray cluster."
NOTICE = ("hetlab: Ray turned on token authentication for this local Ray (its default for local clusters since 2.59: "
          "only processes holding your token, ~/.ray/auth_token, can connect); nothing to fix — see "
          "docs/troubleshooting.md.")


def drop(record: logging.LogRecord) -> bool:
    """A log filter: False for Ray's ``TOKEN_ENABLED`` record, printing ``NOTICE`` the first time."""
    if not record.getMessage().startswith(TOKEN_ENABLED):
        return True
    if not getattr(drop, "noticed", False):
        drop.noticed = True
        print(NOTICE)
    return False


def explain_token_auth() -> None:
    """Ray's "Token authentication is enabled ..." warning becomes hetlab's one-line notice (once)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if drop not in logger.filters:
        logger.addFilter(drop)
