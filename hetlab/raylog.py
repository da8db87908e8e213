"""Ray's log lines that hetlab explains once instead of showing every time (notebooks 03–08).

Ray 2.60, in every process that starts a local cluster while ``RAY_AUTH_MODE`` is unset
(a plain ``ray.init()``, ``hetlab.cluster.connect()`` without an address, or a
``PracticeCluster``), turns token authentication on and logs, from the logger
``ray._private.authentication.authentication_token_setup`` (``_warn_token_auth_enabled``):

    WARNING authentication_token_setup.py:85 -- Token authentication is enabled for this
    Ray cluster. Set RAY_AUTH_MODE=disabled to opt out. For more information, see
    https://docs.ray.io/en/latest/ray-security/token-auth.html

Nothing is wrong (it is the secure default the course wants), yet a notebook shows it as a
red stderr box in every notebook that starts Ray. ``explain_token_auth()`` puts a filter on
that one logger: it drops exactly that message and prints hetlab's one-line notice in its
place, the first time in this process. Every other record passes, Ray's warning that token
authentication is *disabled* included. hetlab calls it just before it starts Ray.
"""
from __future__ import annotations

import logging

TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_ENABLED = "Token authentication is enabled for this Ray cluster."
NOTICE = ("hetlab: Ray turned on token authentication for this local Ray (its default since 2.52: only "
          "processes holding your token, ~/.ray/auth_token, can connect); nothing to fix — see "
          "README, Troubleshooting.")


class TokenNotice(logging.Filter):
    """Swap Ray's "Token authentication is enabled ..." warning for hetlab's one-line notice."""

    shown = False  # per process: the notice is printed once, Ray's warning never

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(TOKEN_ENABLED):
            return True
        if not TokenNotice.shown:
            TokenNotice.shown = True
            print(NOTICE)
        return False


def explain_token_auth() -> None:
    """Install the filter on Ray's token-setup logger (only there; idempotent)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if not any(isinstance(f, TokenNotice) for f in logger.filters):
        logger.addFilter(TokenNotice())
