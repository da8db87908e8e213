"""Ray's log lines that hetlab explains once instead of showing every time (notebooks 03–09).

Ray's "Token authentication is enabled" warning (the secure default the course wants) becomes one
notice per process (``explain_token_auth``); a search drops the traceback a trial process prints when
Ray stops it (``quiet_stopped_processes``). Nothing else of Ray's is hidden.
"""
from __future__ import annotations

import logging

# Ray 2.59 and later turn token authentication on in every process that starts a local cluster while
# RAY_AUTH_MODE is unset, and log from this logger "Token authentication is enabled for this Ray
# cluster. …": a red stderr box in every notebook. The filter drops exactly that record.
TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_ENABLED = "Token authentication is enabled for this Ray cluster."
NOTICE = ("hetlab: Ray turned on token authentication for this local Ray (its default for local clusters since 2.59: "
          "only processes holding your token, ~/.ray/auth_token, can connect); nothing to fix — see "
          "docs/troubleshooting.md.")


class Drop(logging.Filter):
    """Drop the records whose message starts with ``prefix``; the first one this process drops prints
    ``notice`` in its place, if there is one (once per process; Ray's line never)."""

    noticed: set = set()  # the notices printed in this process

    def __init__(self, prefix: str, notice: str | None = None):
        super().__init__()
        self.prefix, self.notice = prefix, notice

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(self.prefix):
            return True
        if self.notice and self.notice not in Drop.noticed:
            Drop.noticed.add(self.notice)
            print(self.notice)
        return False


def explain_token_auth() -> None:
    """Ray's "Token authentication is enabled ..." warning becomes hetlab's one-line notice (once)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if not any(isinstance(f, Drop) for f in logger.filters):
        logger.addFilter(Drop(TOKEN_ENABLED, NOTICE))


# --- a trial process that Ray stops (notebook 09) ------------------------------------------------
# Ray stops a process with SIGTERM, and its handler raises SystemExit (ray/_private/worker.py,
# sigterm_handler, Ray 2.60). When the signal lands inside a weakref callback, Python cannot raise
# there and prints "Exception ignored in: …", the traceback and "SystemExit: 1" to the process's
# stderr, which Ray forwards to the driver: a red traceback about a trial that had already ended.

def without_sigterm_noise(lines: list[str]) -> list[str]:
    """``lines`` less each block from "Exception ignored in" to its "SystemExit" line whose
    traceback passes through Ray's SIGTERM handler; every other line, in order."""
    out, block = [], None
    for line in lines:
        if block is None:
            if line.startswith("Exception ignored in"):
                block = [line]
            else:
                out.append(line)
            continue
        block.append(line)
        if line.startswith("SystemExit"):
            out += [] if any("sigterm_handler" in b for b in block) else block
            block = None
    return out + (block or [])


def quiet_stopped_processes() -> None:
    """Wrap this driver's printer of worker output (Ray's "ray_print_logs" handler) once, so that
    it drops ``without_sigterm_noise``'s blocks. Called when a search starts (``hetlab.search.driver``)."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    with dispatcher._lock:
        for i, (name, handle) in enumerate(dispatcher.handlers):
            if name == "ray_print_logs" and not getattr(handle, "hetlab_quiet", False):
                dispatcher.handlers[i] = (name, _quiet(handle))


def _quiet(handle):
    def printer(data: dict) -> None:
        lines = without_sigterm_noise(data.get("lines") or [])
        if lines:
            handle({**data, "lines": lines})
    printer.hetlab_quiet = True
    return printer
