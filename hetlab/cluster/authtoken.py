"""Where Ray's authentication token lives, and keeping that file private (notebook 04, ``hetlab doctor``).

Ray reads its token from ``RAY_AUTH_TOKEN``, else the file named by
``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``. Ray 2.60 writes that default
file itself (``ray get-auth-token --generate``, and a plain local ``ray.init()``)
with the process umask, usually 0644: anyone on the machine can read it. Every
place hetlab starts or relies on token auth calls ``secure_token_files()``;
``hetlab doctor`` fails while a token file is readable by group or others.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

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
