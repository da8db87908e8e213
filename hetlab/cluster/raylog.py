"""Ray's log lines that hetlab explains once instead of showing every time (notebooks 03–09).

Ray's "Token authentication is enabled" warning (the secure default the course wants) becomes one
notice per process (``explain_token_auth``); a practice cluster drops Ray's "Overwriting previous
Ray address" note (``quiet_address_note``) and Ray Train's "Failed to query … actor state"
(``practice_worker_setup``); a search drops the traceback a trial process prints when Ray stops it (``quiet_stopped_processes``).
"""
from __future__ import annotations

import logging

from hetlab import environment

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


def drop(logger_name: str, prefix: str, notice: str | None = None) -> None:
    """Install a ``Drop`` on that logger only, once (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, Drop) and f.prefix == prefix for f in logger.filters):
        logger.addFilter(Drop(prefix, notice))


def explain_token_auth() -> None:
    """Ray's "Token authentication is enabled ..." warning becomes hetlab's one-line notice."""
    drop(TOKEN_LOGGER, TOKEN_ENABLED, NOTICE)


# --- the practice cluster's workers (notebook 07) ------------------------------------------------

CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"
NO_STATE_API = "Failed to query Ray Train Controller actor state."


def practice_worker_setup() -> None:
    """Runs in every worker process of a practice cluster's nodes (``practice_workers_env``): with no
    dashboard there, Ray's State API is absent, and Ray Train's placement-group cleaner logs each
    second that it could not ask it whether the controller lives. On your pair the API answers."""
    drop(CLEANER_LOGGER, NO_STATE_API)


def practice_workers_env(more: dict | None = None):
    """While a practice node starts, name ``practice_worker_setup`` in Ray's setup-hook variable
    (the one ``runtime_env={"worker_process_setup_hook": …}`` sets), and set ``more``: the node's
    raylet inherits them and so does every worker it starts, without Ray's runtime-env agent."""
    from ray._private.ray_constants import WORKER_PROCESS_SETUP_HOOK_ENV_VAR
    return environment({WORKER_PROCESS_SETUP_HOOK_ENV_VAR: f"{__name__}.practice_worker_setup", **(more or {})})


# --- a practice cluster's start (notebooks 05, 06, 08) -------------------------------------------

ADDRESS_LOGGER = "ray._private.utils"
OVERWRITING = "Overwriting previous Ray address"


def quiet_address_note() -> None:
    """Ray writes the newest local cluster's address to a file (for ``ray.init(address="auto")``) and,
    when a kernel starts a practice cluster after an earlier one, logs "Overwriting previous Ray
    address (…)": a red box in JupyterLab. hetlab connects to its practice cluster by address, so
    there is nothing to act on: a practice cluster drops it in its driver's process."""
    drop(ADDRESS_LOGGER, OVERWRITING)


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
