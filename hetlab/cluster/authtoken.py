"""Ray's authentication token: where it lives, that file kept private, and token auth on (notebook 04).

Ray reads its token from ``RAY_AUTH_TOKEN``, else ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``,
which Ray 2.60 writes with the process umask, usually 0644. Every place hetlab starts or relies on token
auth calls ``secure_token_files()``; ``hetlab doctor`` fails while a token file is open to others.
Token auth goes on for a local Ray as Ray's own ``ray.init()`` does it, and for the pair's drivers.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from hetlab.cluster.raylog import explain_token_auth
from hetlab.vocab import RAY_AUTH_ENV

TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
PRIVATE = 0o600
OPEN_BITS = 0o077  # any permission for group or others


def default_token_path() -> Path:
    """``~/.ray/auth_token``: where Ray writes a generated token."""
    return Path.home() / ".ray" / "auth_token"


def token_files(env: dict | None = None) -> list[Path]:
    """The token files Ray may read here: ``$RAY_AUTH_TOKEN_PATH`` (if set), then ``~/.ray/auth_token``."""
    env = os.environ if env is None else env
    found = []
    named = env.get(TOKEN_PATH_ENV, "").strip()
    if named:
        found.append(Path(named).expanduser())
    if default_token_path() not in found:
        found.append(default_token_path())
    return found


def open_to_others(path: Path) -> bool:
    """True when ``path`` exists and group or others have any permission on it."""
    try:
        return bool(stat.S_IMODE(os.stat(path).st_mode) & OPEN_BITS)
    except FileNotFoundError:
        return False


def secure_token_files(env: dict | None = None) -> list[Path]:
    """chmod 600 every existing token file that group or others can access; returns those changed.

    A file this user cannot change is left as it is (``hetlab doctor`` reports it).
    """
    changed = []
    for path in token_files(env):
        if path.is_file() and open_to_others(path):
            try:
                os.chmod(path, PRIVATE)
            except OSError:
                continue
            changed.append(path)
    return changed


def enable_local_token_auth() -> None:
    """Token auth as Ray 2.60's own local ``ray.init()`` does it, with a private token file.

    Unless ``RAY_AUTH_MODE`` is set, turn token auth on for this process and its children,
    and create ``~/.ray/auth_token`` if no token exists — under umask 077, so the file is
    0600 from the start (Ray alone leaves it 0644) — then chmod 600 any token file that
    is still open to others (``hetlab.cluster.authtoken``).
    """
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default, ensure_token_if_auth_enabled)
    explain_token_auth()  # Ray's "Token authentication is enabled" warning → one hetlab line
    enable_token_auth_by_default()
    previous = os.umask(0o077)
    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    finally:
        os.umask(previous)
    secure_token_files()


def token_mode() -> None:
    """The pair always runs with token auth (notebook 04): a driver whose shell did not export
    ``RAY_AUTH_MODE=token`` gets it here, and Ray's cached config sees it (as Ray's own local default does)."""
    if os.environ.get(RAY_AUTH_ENV):
        return
    from ray._raylet import AuthenticationTokenLoader, Config
    os.environ[RAY_AUTH_ENV] = "token"
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
