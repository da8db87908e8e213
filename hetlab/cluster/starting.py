"""``hetlab head/join --start`` (day two): run the printed ``ray start`` line, bounded in time, and say
a failure in one line of hetlab's, not Ray's retry log (notebook 04, README day two)."""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from hetlab.cluster import authtoken
from hetlab.cluster.commands import shell_line
from hetlab.errors import HetlabError
from hetlab.vocab import TOKEN_PATH

START_LIMIT_S = 180.0  # a `ray start` that has not ended by then will not: Ray retries its GCS for minutes


def start(argv: list[str], env: dict, limit: float = START_LIMIT_S) -> int:
    """``hetlab head/join --start`` (day two: after a reboot, the token and firewall are in place):
    run the printed ``ray start`` line with its environment and return its exit status.

    Refuses in one line, before Ray starts, without the token file that day one wrote, with the
    placeholder ``MAC_IP`` still in the line, or (joining) when the head's port does not answer.
    Ray's own output shows when it started; a failure, or no end within ``limit`` seconds, is one line.
    """
    if not any(path.is_file() and path.stat().st_size for path in authtoken.token_files()):
        raise HetlabError(f"no Ray token in {TOKEN_PATH} here: --start brings back a pair set up "
                          f"before; print the steps (the same command without --start) and follow "
                          f"its token step first.")
    if "--node-ip-address=MAC_IP" in argv:
        raise HetlabError("--start needs this machine's LAN IP: add --ip (macOS: ipconfig getifaddr en0).")
    authtoken.secure_token_files()
    head = next((a.split("=", 1)[1] for a in argv if a.startswith("--address=")), None)
    if head:
        _head_answers(head)
    print(f"hetlab: running {shell_line(argv, env)}", flush=True)
    log = tempfile.TemporaryFile("w+")   # a file, not a pipe: the daemons Ray starts may keep it open
    try:
        ray_start = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    except FileNotFoundError:
        raise HetlabError("no `ray` command here: activate the course's environment first "
                          "(conda activate hetlab).") from None
    try:
        ray_start.wait(timeout=limit)
        log.seek(0)
        said = log.read()
    except subprocess.TimeoutExpired:
        _stop(ray_start)
        raise HetlabError(f"`ray start` had not ended after {limit:.0f} s (its node could not join{f' {head}' if head else ''}), "
                          f"so hetlab stopped it: run `hetlab doctor{_head_flag(head)}` here.") from None
    if ray_start.returncode == 0:
        print(said, end="", flush=True)
        return 0
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    raise HetlabError(f"`ray start` failed (exit {ray_start.returncode}): {(lines or ['no output'])[-1][:240]} — "
                      f"run `hetlab doctor{_head_flag(head)}` here for the full check.")


def _head_flag(head: str | None) -> str:
    """`` --head ADDRESS`` for a doctor line to copy, quoted: zsh reads an unquoted ``[fd00::10]:6379``
    as a glob pattern ("no matches found") and runs nothing."""
    return f" --head {shlex.quote(head)}" if head else ""


def _head_answers(head: str) -> None:
    """One line, in seconds, when the head's GCS port does not answer from here (``reach.port_open``)."""
    from hetlab.cluster.reach import parse_address, port_open
    host, port, _ = parse_address(head)
    problem = port_open(host, port, timeout=5.0)
    if problem:
        raise HetlabError(f"the head at {head} does not answer from here: {problem}. Start it first "
                          f"(`hetlab head --start` on the desktop); if it runs, its firewall may not admit "
                          f"this machine's address (`hetlab doctor{_head_flag(head)}` checks both).")


def _stop(process: subprocess.Popen) -> None:
    """Stop a ``ray start`` that did not end, and what it started (by PID: its descendants)."""
    import psutil
    try:
        family = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        family = []
    for proc in [process, *family]:
        try:
            proc.kill()
        except (psutil.Error, OSError):
            pass
    process.wait(timeout=10)
